"""Workflows seen from handlers, on both stores: ``ctx.parent_results()`` (fan-in) and
``ctx.enqueue()`` (children written with the result, fenced like it)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from service.jobs import Completion, JobState, NewJob
from service.store import Store
from service.worker.context import JobContext
from service.worker.registry import App
from tests.conftest import Database, FakeClock
from tests.store.builders import claim_one, new_job, reap
from tests.worker.test_worker_in_process import running_worker


@pytest.fixture
def live_store(make_store: Callable[..., Store], store_url: str) -> Store:
    return make_store(store_url)


def wait_for(predicate: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_handler_fans_out_and_the_last_job_reads_every_parents_result(live_store: Store, db: Database):
    seen: list[dict[uuid.UUID, object]] = []
    app = App()

    @app.handler("split")
    def split(ctx: JobContext) -> str:
        chunks = [ctx.enqueue("classify", {"n": n}) for n in range(5)]
        ctx.enqueue("summarise", {}, depends_on=chunks)
        return "split"

    @app.handler("classify")
    def classify(ctx: JobContext) -> dict[str, object]:
        return {"label": ctx.payload["n"]}

    @app.handler("summarise")
    def summarise(ctx: JobContext) -> int:
        results = ctx.parent_results()
        seen.append(results)
        return len(results)

    root = live_store.enqueue(NewJob("split"))
    with running_worker(live_store, app, concurrency=3):
        wait_for(lambda: db.count("jobs", "kind = 'summarise' AND state = 'succeeded'") == 1)

    assert live_store.get(root.id).state is JobState.SUCCEEDED
    assert db.count("jobs", "state = 'succeeded'") == 7
    [results] = seen
    assert list(results.values()) == [{"label": n} for n in range(5)]  # oldest parent first
    assert list(results) == sorted(results)


def test_children_are_written_with_the_result_and_not_by_an_attempt_that_lost_its_lease(
    store: Store, db: Database, clock: FakeClock
):
    store.enqueue(new_job(max_attempts=2))
    stale = claim_one(store, lease_seconds=10)
    clock.advance(11)
    reap(store)
    clock.advance(3600)  # past the retry's backoff
    winner = claim_one(store, "worker-b")
    child = (NewJob("child", idempotency_key=f"jobq-child:{stale.id}:0"),)

    assert store.complete_many([Completion(stale.lease, "stale", children=child)]) == [stale.lease]
    assert db.count("jobs", "kind = 'child'") == 0  # the stale attempt wrote neither
    assert store.complete_many([Completion(winner.lease, "won", children=child)]) == []
    assert db.count("jobs", "kind = 'child'") == 1
    assert store.get_result(winner.id) == "won"


def test_a_child_enqueued_twice_under_its_derived_key_is_written_once(store: Store, db: Database):
    parent = store.enqueue(new_job())
    key = f"jobq-child:{parent.id}:0"
    first = store.enqueue_many([NewJob("child", idempotency_key=key)])
    store.enqueue(NewJob("other"))
    job = store.claim("w", ["default"], 1, 30)[0]
    assert store.complete_many([Completion(job.lease, "ok", children=(NewJob("child", idempotency_key=key),))]) == []
    assert db.count("jobs", "kind = 'child'") == 1
    assert first[0].kind == "child"


def test_context_enqueue_keys_children_by_job_and_number_and_refuses_forward_positions():
    from tests.worker.test_worker_units import claimed

    ctx = JobContext(claimed(), "w")
    assert ctx.enqueue("a") == 0
    assert ctx.enqueue("b", depends_on=[0]) == 1
    keys = [child.idempotency_key for child in ctx.children()]
    assert keys == [f"jobq-child:{ctx.job_id}:0", f"jobq-child:{ctx.job_id}:1"]
    with pytest.raises(ValueError, match="earlier jobs"):
        ctx.enqueue("c", depends_on=[5])
    assert len(ctx.children()) == 2


def test_context_enqueue_refuses_at_once_a_child_every_producer_refuses():
    """The payload and job rules of every other enqueue (service.payloads), with the worker's
    store's payload bound: the handler hears of it at the call, and nothing is added."""
    from service.errors import InvalidInput, PayloadTooLarge
    from service.payloads import MAX_JSON_DEPTH
    from tests.test_payloads import nested
    from tests.worker.test_worker_units import claimed

    ctx = JobContext(claimed(), "w", max_payload_bytes=2_048)
    with pytest.raises(PayloadTooLarge, match="over the limit of 2048"):
        ctx.enqueue("a", {"s": "x" * 2_048})
    with pytest.raises(InvalidInput, match=f"nested more than {MAX_JSON_DEPTH}"):
        ctx.enqueue("a", nested(MAX_JSON_DEPTH + 1))
    with pytest.raises(InvalidInput, match="NUL"):
        ctx.enqueue("a", {"s": "a\x00b"})
    with pytest.raises(InvalidInput, match="kind"):
        ctx.enqueue("", {})
    with pytest.raises(InvalidInput, match="visible ASCII"):
        ctx.enqueue("a", idempotency_key="caf\u00e9")
    assert ctx.children() == ()
    assert ctx.enqueue("a", nested(MAX_JSON_DEPTH)) == 0


def test_children_naming_a_missing_parent_refuse_the_result_with_them(store: Store, db: Database):
    store.enqueue(new_job())
    job = claim_one(store)
    child = NewJob("child", depends_on=(uuid.uuid4(),), idempotency_key=f"jobq-child:{job.id}:0")
    with pytest.raises(ValueError, match="names a parent that does not exist"):
        store.complete_many([Completion(job.lease, "ok", children=(child,))])
    assert store.get(job.id).state is JobState.RUNNING  # nothing written: the finisher fails it, saying why
    assert db.count("jobs", "kind = 'child'") == 0
