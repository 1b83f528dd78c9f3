"""Why isn't my job running? Each reason, built on purpose, is named (store facts + service.explain)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from service.errors import JobNotFound
from service.explain import Explanation, explain
from service.jobs import WorkerInfo
from service.limits import Limit
from service.store import Store
from tests.conftest import FakeClock
from tests.store.builders import LEASE_SECONDS, fail_job, new_job

ALIVE = 30.0


def why(store: Store, job_id: uuid.UUID, tenant: str | None = None) -> Explanation:
    return explain(store.explain_facts(job_id, tenant, workers_seen_within=ALIVE))


def codes(explanation: Explanation) -> list[str]:
    return [reason.code for reason in explanation.reasons]


@pytest.fixture
def worker(store: Store) -> WorkerInfo:
    """A live worker serving the default queue and the kind new_job() makes."""
    info = WorkerInfo(id="host-1:42:abc", host="host-1", pid=42, queues=("default",), kinds=("resize",), concurrency=4)
    store.register_worker(info)
    return info


def test_a_delayed_job_is_not_due_yet(store, worker, clock: FakeClock):
    job = store.enqueue(new_job(delay_seconds=90))
    explanation = why(store, job.id)
    assert codes(explanation) == ["not_due"]
    due = clock.now() + timedelta(seconds=90)
    assert explanation.reasons[0].details["due_at"] == due.isoformat().replace("+00:00", "Z")
    assert "delay" in explanation.summary


def test_a_job_in_retry_backoff_names_the_attempt_and_its_error(store, worker, clock: FakeClock):
    job = store.enqueue(new_job())
    [claimed] = store.claim(worker.id, ["default"], 1, LEASE_SECONDS)
    fail_job(store, claimed, "TimeoutError: upstream took too long", retryable=True)
    if store.get(job.id).run_after <= clock.now():
        pytest.skip("the jittered backoff came out as zero")  # uniform in [0, base]: rare
    explanation = why(store, job.id)
    assert codes(explanation) == ["not_due"]
    assert explanation.reasons[0].details["after_attempt"] == 1
    assert "TimeoutError: upstream took too long" in explanation.summary


def test_a_full_scope_names_its_running_jobs_to_their_own_tenant_only(store, worker):
    store.set_limit(Limit("key:gpu", concurrency=1))
    first = store.enqueue(new_job(concurrency_key="gpu", tenant="acme"))
    second = store.enqueue(new_job(concurrency_key="gpu", tenant="beta"))
    store.claim(worker.id, ["default"], 5, LEASE_SECONDS)

    mine = why(store, second.id, "beta")
    assert codes(mine) == ["scope_full"]
    assert mine.reasons[0].details == {"scope": "key:gpu", "running": 1, "limit": 1, "running_job_ids": []}
    assert "key:gpu is full (1 of 1 running)" in mine.summary
    assert why(store, second.id).reasons[0].details["running_job_ids"] == [str(first.id)]  # an operator sees all


def test_a_rate_limit_says_when_the_next_start_is_allowed(store, worker, clock: FakeClock):
    store.set_limit(Limit("kind:resize", rate=1, per_seconds=60.0))
    store.enqueue(new_job())
    waiting = store.enqueue(new_job())
    store.claim(worker.id, ["default"], 5, LEASE_SECONDS)

    explanation = why(store, waiting.id)
    assert codes(explanation) == ["rate_limited"]
    assert explanation.reasons[0].details["next_start_at"] == "2030-01-01T12:01:00Z"  # the next minute window


def test_no_live_worker_for_the_queue_or_the_kind(store, clock: FakeClock):
    store.register_worker(WorkerInfo(id="w:1:a", host="w", pid=1, queues=("email",), kinds=("send",), concurrency=1))
    store.register_worker(
        WorkerInfo(id="w:2:b", host="w", pid=2, queues=("default",), kinds=("ocr", "resize"), concurrency=1)
    )
    elsewhere = store.enqueue(new_job(queue="sms"))
    typo = store.enqueue(new_job("resise"))

    assert codes(why(store, elsewhere.id)) == ["no_worker_for_queue"]
    explanation = why(store, typo.id)
    assert codes(explanation) == ["no_worker_for_kind"]
    assert explanation.reasons[0].details["kinds_handled"] == ["ocr", "resize"]
    assert "'resise'" in explanation.summary and "ocr, resize" in explanation.summary

    clock.advance(ALIVE + 1)  # the workers stopped reporting: none is live
    assert codes(why(store, typo.id)) == ["no_worker_for_queue"]


def test_a_due_job_whose_only_worker_went_silent_is_not_promised_a_free_slot(store, worker, clock: FakeClock):
    """Issue 26: for ~30 s after the only worker of a queue crashed, explain said "a free worker
    slot takes it". A worker touches its row every 10 s: past WORKER_LATE_SECONDS without one,
    explain says it may have stopped."""
    job = store.enqueue(new_job())
    assert codes(why(store, job.id)) == ["in_line"]

    clock.advance(20)  # two missed touches, still "alive" by the 30 s window
    explanation = why(store, job.id)
    assert codes(explanation) == ["no_worker_for_queue"]
    assert "has reported for 20 s" in explanation.summary and "may have stopped" in explanation.summary

    store.register_worker(worker)  # it touches again: back in line
    assert codes(why(store, job.id)) == ["in_line"]


def test_a_due_job_says_how_many_of_its_tenant_are_ahead(store, worker):
    store.enqueue_many([new_job(priority=5), new_job(priority=1)])
    last = store.enqueue(new_job(priority=1))
    store.enqueue(new_job(tenant="other", priority=9))  # another tenant's line is not this one's

    explanation = why(store, last.id)
    assert codes(explanation) == ["in_line"]
    assert explanation.reasons[0].details == {"ahead": 2}


def test_a_running_job_names_its_worker_and_lease_and_goes_stale(store, worker, clock: FakeClock):
    job = store.enqueue(new_job())
    store.claim(worker.id, ["default"], 1, LEASE_SECONDS)
    clock.advance(5)

    explanation = why(store, job.id)
    assert codes(explanation) == ["running"]
    assert explanation.reasons[0].details["host"] == "host-1" and explanation.reasons[0].details["pid"] == 42
    assert "attempt 1 of 3" in explanation.summary and "last heartbeat 5.0s ago" in explanation.summary

    clock.advance(LEASE_SECONDS)
    assert codes(why(store, job.id)) == ["stale"]


def test_a_finished_job_says_how_it_ended(store, worker):
    job = store.enqueue(new_job(max_attempts=1))
    [claimed] = store.claim(worker.id, ["default"], 1, LEASE_SECONDS)
    fail_job(store, claimed, "ValueError: bad image", retryable=True)

    explanation = why(store, job.id)
    assert codes(explanation) == ["failed"]
    assert "last error: ValueError: bad image" in explanation.summary


def test_another_tenants_job_is_not_found(store):
    job = store.enqueue(new_job(tenant="acme"))
    with pytest.raises(JobNotFound):
        store.explain_facts(job.id, "beta", workers_seen_within=ALIVE)
