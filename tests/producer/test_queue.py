"""The producer API (service.Queue) on both stores: the API's rules, from Python."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from service import App, Queue
from service.config import Settings
from service.errors import (
    IdempotencyConflict,
    InvalidInput,
    InvalidTransition,
    JobCancelled,
    JobFailed,
    JobNotFound,
    PayloadTooLarge,
)
from service.jobs import JobState, NewJob
from service.store import Store
from tests.conftest import Database
from tests.worker.test_worker_in_process import running_worker


@pytest.fixture
def queue(store_url: str) -> Iterator[Queue]:
    with Queue(store_url) as opened:
        yield opened


def test_enqueue_get_list_and_cancel(queue: Queue, db: Database) -> None:
    job = queue.enqueue("classify", {"items": ["a"]}, queue="q1", priority=7, total=1)
    assert job.state is JobState.QUEUED and (job.queue, job.priority, job.total) == ("q1", 7, 1)
    assert db.job(job.id)["payload"] == {"items": ["a"]}
    assert queue.get(str(job.id)).id == job.id
    batch = queue.enqueue_many([NewJob(kind="a"), {"kind": "b", "payload": {"n": 1}, "delay_seconds": 60}])
    assert [status.kind for status in batch] == ["a", "b"]
    page = queue.list(limit=2)
    assert [s.id for s in page.items] == [batch[1].id, batch[0].id]
    assert [s.id for s in queue.list(limit=2, after=page.next_after_id).items] == [job.id]
    assert queue.cancel(job.id).state is JobState.CANCELLED
    with pytest.raises(InvalidTransition) as refused:
        queue.cancel(job.id)
    assert refused.value.state == "cancelled"
    with pytest.raises(InvalidTransition):
        queue.result(batch[0].id)  # queued: no result yet


BAD_ENQUEUES: list[tuple[str, Any, dict[str, Any], type[Exception]]] = [
    ("", {}, {}, InvalidInput),
    ("k", [1], {}, InvalidInput),
    ("k", {}, {"priority": 1001}, InvalidInput),
    ("k", {}, {"max_attempts": 0}, InvalidInput),
    ("k", {}, {"colour": "red"}, InvalidInput),
    ("k", {}, {"depends_on": ["not-a-uuid"]}, InvalidInput),
    ("k", {}, {"depends_on": [uuid.UUID(int=7)]}, JobNotFound),
    ("k", {"big": "x" * 1_100_000}, {}, PayloadTooLarge),
]
"""enqueue(kind, payload, **options) calls each producer refuses by the same name (AsyncQueue too)."""


def test_bad_input_is_refused_by_name_and_writes_nothing(queue: Queue, db: Database) -> None:
    for kind, payload, options, error in BAD_ENQUEUES:
        with pytest.raises(error):
            queue.enqueue(kind, payload, **options)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        queue.enqueue_many([NewJob(kind="fine"), {"kind": "bad", "priority": -1}])
    with (
        pytest.raises(InvalidInput, match="needs PostgreSQL")
        if db.dialect == "sqlite"
        else pytest.raises(InvalidInput, match="psycopg connection")
    ):
        queue.enqueue("k", connection=object())
    with pytest.raises(InvalidInput):
        queue.get("not-a-uuid")
    assert db.count("jobs") == 0


def test_idempotency_key_as_the_api_rules(queue: Queue, db: Database) -> None:
    first = queue.enqueue("invoice", {"id": 1}, idempotency_key="inv-1")
    again = queue.enqueue("invoice", {"id": 1}, idempotency_key="inv-1")
    assert again.id == first.id and db.count("jobs") == 1
    with pytest.raises(IdempotencyConflict, match="payload"):
        queue.enqueue("invoice", {"id": 2}, idempotency_key="inv-1")
    with Queue(queue.settings.database_url, tenant="other") as other:  # keys are per tenant
        assert other.enqueue("invoice", {"id": 2}, idempotency_key="inv-1").id != first.id
        with pytest.raises(JobNotFound):
            other.get(first.id)  # another tenant's job is not found
    assert db.count("jobs") == 2


def test_wait_returns_a_success_and_raises_on_failure(store_url: str, make_store: object) -> None:
    app = App()
    app.register("ok", lambda ctx: {"echo": ctx.payload["x"]})

    @app.handler("bad", max_attempts=1)
    def bad(ctx: object) -> None:
        raise ValueError("no good")

    with Queue(store_url) as queue, running_worker(queue.store, app):
        ok = queue.enqueue("ok", {"x": 3})
        bad_job = queue.enqueue("bad", max_attempts=1)
        assert queue.wait(ok.id, timeout=20).state is JobState.SUCCEEDED
        assert queue.result(ok.id) == {"echo": 3}
        with pytest.raises(JobFailed, match="no good"):
            queue.wait(bad_job.id, timeout=20)
        later = queue.enqueue("ok", {"x": 1}, delay_seconds=3600)
        with pytest.raises(TimeoutError):
            queue.wait(later.id, timeout=0.3)
        queue.cancel(later.id)
        with pytest.raises(JobCancelled):
            queue.wait(later.id, timeout=5)


def test_a_queue_on_an_open_store_leaves_it_open(store: Store) -> None:
    with Queue(settings=Settings(), store=store) as queue:
        job = queue.enqueue("k")
    assert store.get(job.id).id == job.id  # still usable: the Queue did not close it
    assert isinstance(uuid.UUID(str(job.id)), uuid.UUID)
