"""How an attempt ends: complete, fail (retry or not), release."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from service.errors import InvalidInput, InvalidTransition, JobNotFound
from service.jobs import ClaimRequest, Completion, FailResult, JobState
from service.retry import RetryPolicy
from tests.conftest import Database, FakeClock
from tests.store.builders import claim_one, fail_job, new_job

# -- complete -------------------------------------------------------------------------------


def test_complete_stores_the_result_and_closes_the_attempt(store, db: Database, clock: FakeClock):
    store.enqueue(new_job(total=5, payload={"secret": "payload-value"}))
    job = claim_one(store, "worker-a")
    clock.advance(7)

    store.complete(job.lease, {"labels": ["cat"], "score": 0.97})

    status = store.get(job.id)
    assert status.state is JobState.SUCCEEDED
    assert (status.done, status.total) == (5, 5)  # a finished job is fully done
    assert status.finished_at == clock.now()
    assert status.lease_expires_at is None and status.stale is False
    assert status.result_id is not None
    assert store.get_result(job.id) == {"labels": ["cat"], "score": 0.97}
    [attempt] = db.attempts(job.id)
    assert (attempt["outcome"], attempt["finished_at"], attempt["error"]) == ("succeeded", clock.now(), None)
    assert db.count("job_results") == 1


def test_complete_takes_the_handlers_final_progress(store):
    counted, sized, heartbeat_only = store.enqueue_many([new_job(), new_job(), new_job(total=8)])
    jobs = {job.id: job for job in store.claim("worker-a", ["default"], 3, 30)}
    store.heartbeat(jobs[heartbeat_only.id].lease, 30, done=6)

    store.complete(jobs[counted.id].lease, "ok", done=3)
    lost = store.complete_many(
        [
            Completion(jobs[sized.id].lease, "ok", done=2, total=5),
            Completion(jobs[heartbeat_only.id].lease, "ok"),  # nothing new since the heartbeat
        ]
    )

    assert lost == []
    assert (store.get(counted.id).done, store.get(counted.id).total) == (3, None)
    assert (store.get(sized.id).done, store.get(sized.id).total) == (5, 5)  # a finished job is fully done
    assert (store.get(heartbeat_only.id).done, store.get(heartbeat_only.id).total) == (8, 8)


def test_complete_and_claim_finishes_the_batch_and_refills_its_slots(store, db: Database, clock: FakeClock):
    store.enqueue_many([new_job(payload={"n": n}) for n in range(5)])
    first, second = store.claim("worker-a", ["default"], 2, 30)
    stolen = claim_one(store, "worker-b")
    clock.advance(3)
    store.heartbeat(stolen.lease, 30)
    lost_lease = dataclasses.replace(stolen.lease, owner="worker-a")  # a token worker-a never held

    lost, claimed = store.complete_and_claim(
        [Completion(first.lease, {"ok": 1}), Completion(second.lease, {"ok": 2}), Completion(lost_lease, "x")],
        ClaimRequest("worker-a", ("default",), 3, 30),
    )

    assert lost == [lost_lease]
    assert store.get_result(first.id) == {"ok": 1} and store.get_result(second.id) == {"ok": 2}
    assert store.get(stolen.id).state is JobState.RUNNING  # the lost lease wrote nothing
    assert len(claimed) == 2  # as many as were left: never more than the limit
    for job in claimed:
        status = store.get(job.id)
        assert (status.state, status.lease_owner, status.attempts) == (JobState.RUNNING, "worker-a", 1)
        assert status.lease_expires_at == clock.now() + timedelta(seconds=30)
        assert [a["outcome"] for a in db.attempts(job.id)] == [None]
    assert [job.id for job in claimed] == sorted(job.id for job in claimed)


def test_complete_and_claim_with_nothing_left_to_claim_still_completes(store):
    store.enqueue(new_job())
    job = claim_one(store, "worker-a")

    assert store.complete_and_claim([Completion(job.lease, None)], ClaimRequest("worker-a", ("default",), 1, 30)) == (
        [],
        [],
    )
    assert store.get(job.id).state is JobState.SUCCEEDED


def test_complete_and_claim_refuses_a_bad_claim_before_writing(store):
    store.enqueue(new_job())
    job = claim_one(store, "worker-a")

    with pytest.raises(InvalidInput):
        store.complete_and_claim([Completion(job.lease, None)], ClaimRequest("worker-a", ("default",), 0, 30))
    assert store.get(job.id).state is JobState.RUNNING


@pytest.mark.parametrize("done, total", [(-1, None), (6, 5), (True, None), (1, "5")])
def test_complete_with_bad_progress_is_refused_and_changes_nothing(store, db: Database, done, total):
    store.enqueue(new_job())
    job = claim_one(store)

    with pytest.raises(InvalidInput):
        store.complete_many([Completion(job.lease, "ok", done=done, total=total)])

    assert store.get(job.id).state is JobState.RUNNING
    assert db.count("job_results") == 0


def test_a_status_never_carries_the_payload_or_the_result(store):
    store.enqueue(new_job(payload={"secret": "payload-value"}))
    job = claim_one(store)
    store.complete(job.lease, {"secret": "result-value"})

    status = store.get(job.id)

    names = {f.name for f in dataclasses.fields(status)}
    assert not names & {"payload", "result", "body", "checkpoint"}
    assert "payload-value" not in repr(status) and "result-value" not in repr(status)


def test_any_json_value_is_a_result(store):
    results = [None, 0, 2.5, "text", True, [1, 2], {"nested": {"deep": [True, None]}}]
    store.enqueue_many([new_job(payload={"i": i}) for i in range(len(results))])
    jobs = store.claim("worker-a", ["default"], len(results), 30)

    for job, result in zip(jobs, results, strict=True):
        store.complete(job.lease, result)

    assert [store.get_result(job.id) for job in jobs] == results


def test_completing_twice_with_the_same_lease_is_a_no_op(store, db: Database, clock: FakeClock):
    store.enqueue(new_job())
    job = claim_one(store)
    store.complete(job.lease, {"v": 1})
    before = db.job(job.id)
    clock.advance(5)

    store.complete(job.lease, {"v": 2})  # a retry after an unknown commit outcome: the receipt answers

    assert db.job(job.id) == before
    assert store.get_result(job.id) == {"v": 1}
    assert db.count("job_results") == 1
    assert [a["outcome"] for a in db.attempts(job.id)] == ["succeeded"]


def test_a_result_is_not_there_before_success(store):
    queued = store.enqueue(new_job())

    with pytest.raises(InvalidTransition) as raised:
        store.get_result(queued.id)
    assert raised.value.state == "queued"
    claim_one(store)
    with pytest.raises(InvalidTransition):
        store.get_result(queued.id)


def test_another_tenants_result_is_not_found(store):
    store.enqueue(new_job(tenant="acme"))
    job = claim_one(store)
    store.complete(job.lease, {"ok": True})

    with pytest.raises(JobNotFound):
        store.get_result(job.id, "globex")
    assert store.get_result(job.id, "acme") == {"ok": True}


# -- fail ---------------------------------------------------------------------------------


def test_a_retryable_failure_queues_the_job_again_within_the_backoff_ceiling(
    make_store, store_url, db: Database, clock: FakeClock
):
    policy = RetryPolicy(base_seconds=10, cap_seconds=15)
    store = make_store(store_url, clock=clock)
    store.enqueue(new_job(max_attempts=3))
    first = claim_one(store)

    result = fail_job(store, first, "Traceback: TimeoutError", retryable=True, policy=policy)

    assert result.state is JobState.QUEUED
    assert clock.now() <= result.run_after <= clock.now() + timedelta(seconds=policy.ceiling(1))
    status = store.get(first.id)
    assert (status.state, status.attempts, status.error) == (JobState.QUEUED, 1, "Traceback: TimeoutError")
    assert status.run_after == result.run_after
    assert status.lease_owner is None and status.lease_expires_at is None and status.finished_at is None
    [attempt] = db.attempts(first.id)
    assert (attempt["outcome"], attempt["error"]) == ("failed", "Traceback: TimeoutError")
    assert attempt["finished_at"] == clock.now()

    clock.advance(policy.ceiling(1))
    second = claim_one(store)
    assert second.attempt == 2
    result = fail_job(store, second, "again", retryable=True, policy=policy)
    assert clock.now() <= result.run_after <= clock.now() + timedelta(seconds=policy.ceiling(2))


def test_retry_delays_are_jittered(make_store, store_url, clock: FakeClock):
    store = make_store(store_url, clock=clock)
    policy = RetryPolicy(base_seconds=100, cap_seconds=100)
    store.enqueue_many([new_job(payload={"i": i}) for i in range(8)])
    delays = set()
    for job in store.claim("worker-a", ["default"], 8, 30):
        delays.add(fail_job(store, job, "boom", retryable=True, policy=policy).run_after)

    assert len(delays) > 1  # jobs that failed together do not retry together


def test_a_permanent_failure_fails_the_job_with_its_error(store, db: Database, clock: FakeClock):
    store.enqueue(new_job(max_attempts=5))
    job = claim_one(store)

    result = fail_job(store, job, "PermanentError: unsupported format", retryable=False)

    assert result == FailResult(state=JobState.FAILED, run_after=None)
    status = store.get(job.id)
    assert (status.state, status.error, status.attempts) == (JobState.FAILED, "PermanentError: unsupported format", 1)
    assert status.finished_at == clock.now() and status.lease_expires_at is None
    [attempt] = db.attempts(job.id)
    assert (attempt["outcome"], attempt["error"]) == ("failed", "PermanentError: unsupported format")
    assert store.claim("worker-b", ["default"], 10, 30) == []


def test_a_failure_on_the_last_attempt_fails_the_job(store, clock: FakeClock):
    store.enqueue(new_job(max_attempts=2))
    fail_job(store, claim_one(store), "first", retryable=True)
    clock.advance(3600)
    last = claim_one(store)
    assert last.attempt == 2

    result = fail_job(store, last, "second", retryable=True)

    assert result.state is JobState.FAILED
    status = store.get(last.id)
    assert (status.state, status.attempts, status.error) == (JobState.FAILED, 2, "second")


def test_failing_twice_with_the_same_lease_is_a_no_op(store, db: Database):
    store.enqueue(new_job(max_attempts=1))
    job = claim_one(store)
    fail_job(store, job, "boom", retryable=True)
    before = db.job(job.id)

    again = fail_job(store, job, "boom", retryable=True)

    assert again.state is JobState.FAILED
    assert db.job(job.id) == before
    assert len(db.attempts(job.id)) == 1


# -- release ------------------------------------------------------------------------------


def test_release_queues_the_job_at_once_without_charging_the_attempt(store, db: Database, clock: FakeClock):
    store.enqueue(new_job(run_after=clock.now() - timedelta(minutes=5)))
    job = claim_one(store, "worker-a")
    clock.advance(12)

    store.release(job.lease)

    status = store.get(job.id)
    assert (status.state, status.attempts) == (JobState.QUEUED, 0)
    assert status.run_after == clock.now()
    assert status.lease_owner is None and status.lease_expires_at is None
    [attempt] = db.attempts(job.id)
    assert (attempt["outcome"], attempt["finished_at"]) == ("released", clock.now())

    again = claim_one(store, "worker-b")
    assert (again.id, again.attempt) == (job.id, 1)


def test_release_on_a_later_attempt_gives_back_only_that_attempt(store, clock: FakeClock):
    store.enqueue(new_job(max_attempts=3))
    fail_job(store, claim_one(store), "boom", retryable=True)
    clock.advance(3600)
    second = claim_one(store)

    store.release(second.lease)

    assert store.get(second.id).attempts == 1


def test_releasing_twice_with_the_same_lease_is_a_no_op(store, db: Database):
    store.enqueue(new_job())
    job = claim_one(store)
    store.release(job.lease)
    before = db.job(job.id)

    store.release(job.lease)

    assert db.job(job.id) == before
