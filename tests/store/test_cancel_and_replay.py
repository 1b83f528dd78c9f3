"""Cancelling jobs, and replaying failed ones (invariant 5: terminal jobs change only through replay)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from service.errors import InvalidTransition, JobNotFound
from service.jobs import JobState, ReplayFilter
from tests.conftest import Database, FakeClock
from tests.store.builders import claim_one, fail_job, new_job

# -- cancel -------------------------------------------------------------------------------


def test_cancelling_a_queued_job_cancels_it_at_once(store, clock: FakeClock):
    queued = store.enqueue(new_job())
    clock.advance(2)

    status = store.cancel(queued.id)

    assert status.state is JobState.CANCELLED
    assert status.cancel_requested is False
    assert status.finished_at == clock.now()
    assert store.get(queued.id) == status
    assert store.claim("worker-a", ["default"], 10, 30) == []


def test_cancelling_a_running_job_asks_its_worker_to_stop(store, db: Database, clock: FakeClock):
    store.enqueue(new_job())
    job = claim_one(store, "worker-a")

    status = store.cancel(job.id)

    assert (status.state, status.cancel_requested) == (JobState.RUNNING, True)
    assert store.heartbeat(job.lease, 30).cancel_requested is True
    clock.advance(1)
    store.acknowledge_cancel(job.lease)
    status = store.get(job.id)
    assert status.state is JobState.CANCELLED
    assert status.finished_at == clock.now() and status.lease_expires_at is None
    [attempt] = db.attempts(job.id)
    assert (attempt["outcome"], attempt["finished_at"]) == ("cancelled", clock.now())


def test_a_failure_after_a_cancel_request_ends_cancelled(store):
    store.enqueue(new_job(max_attempts=3))
    job = claim_one(store)
    store.cancel(job.id)

    result = fail_job(store, job, "interrupted", retryable=True)

    assert result.state is JobState.CANCELLED
    assert store.get(job.id).state is JobState.CANCELLED


@pytest.mark.parametrize("end", ["succeeded", "failed", "cancelled"])
def test_cancelling_a_finished_job_is_an_invalid_transition(store, db: Database, end):
    queued = store.enqueue(new_job(max_attempts=1))
    if end == "cancelled":
        store.cancel(queued.id)
    else:
        job = claim_one(store)
        if end == "succeeded":
            store.complete(job.lease, 1)
        else:
            fail_job(store, job, "boom", retryable=False)
    before = db.job(queued.id)

    with pytest.raises(InvalidTransition) as raised:
        store.cancel(queued.id)

    assert raised.value.state == end
    assert end in str(raised.value)
    assert db.job(queued.id) == before


def test_another_tenant_cannot_cancel_a_job(store, db: Database):
    queued = store.enqueue(new_job(tenant="acme"))

    with pytest.raises(JobNotFound):
        store.cancel(queued.id, "globex")
    assert db.job(queued.id)["state"] == "queued"
    assert store.cancel(queued.id, "acme").state is JobState.CANCELLED


def test_cancelling_an_unknown_job_is_not_found(store):
    with pytest.raises(JobNotFound):
        store.cancel(uuid.uuid4())


# -- replay -------------------------------------------------------------------------------


def _failed_job(store, kind: str = "resize", error: str = "boom", **fields):
    store.enqueue(new_job(kind, max_attempts=1, **fields))
    job = claim_one(store, kinds=[kind])
    fail_job(store, job, error, retryable=False)
    return job


def test_replay_puts_a_failed_job_back_with_attempts_zero_and_records_it(store, db: Database, clock: FakeClock):
    failed = _failed_job(store, error="KeyError: 'width'")
    clock.advance(60)

    replayed = store.replay(ReplayFilter(ids=(failed.id,)), by="alice")

    assert replayed == [failed.id]
    status = store.get(failed.id)
    assert (status.state, status.attempts, status.error) == (JobState.QUEUED, 0, None)
    assert status.run_after == clock.now() and status.finished_at is None
    record = db.one("SELECT * FROM job_replays WHERE job_id = %(id)s", id=failed.id)
    assert record["replayed_by"] == "alice"
    assert record["replayed_at"] == clock.now()
    assert (record["previous_state"], record["previous_error"], record["previous_attempts"]) == (
        "failed",
        "KeyError: 'width'",
        1,
    )
    again = claim_one(store)
    assert (again.id, again.attempt) == (failed.id, 1)
    assert len(db.attempts(failed.id)) == 2  # the history of the first run is kept


def test_a_dry_run_replay_names_the_jobs_and_changes_nothing(store, db: Database):
    failed = _failed_job(store)
    before = db.rows("SELECT * FROM jobs ORDER BY id")

    assert store.replay(ReplayFilter(), by="alice", dry_run=True) == [failed.id]

    assert db.rows("SELECT * FROM jobs ORDER BY id") == before
    assert db.count("job_replays") == 0


def test_replay_by_filter_takes_matching_failed_jobs_only(store, db: Database, clock: FakeClock):
    oom = _failed_job(store, "resize", "MemoryError: out of memory")
    _failed_job(store, "resize", "KeyError: 'width'")
    _failed_job(store, "transcribe", "MemoryError: out of memory")
    clock.advance(10)
    cancelled = store.enqueue(new_job("resize"))
    store.cancel(cancelled.id)

    assert store.replay(ReplayFilter(kind="resize", error_like="memoryerror"), by="bob") == [oom.id]
    assert db.count("job_replays") == 1
    assert store.get(cancelled.id).state is JobState.CANCELLED


def test_replay_takes_cancelled_jobs_only_when_asked(store):
    cancelled = store.enqueue(new_job())
    store.cancel(cancelled.id)

    assert store.replay(ReplayFilter(), by="bob") == []
    assert store.replay(ReplayFilter(include_cancelled=True), by="bob") == [cancelled.id]
    assert store.get(cancelled.id).state is JobState.QUEUED


def test_replay_by_id_takes_a_cancelled_job(store):
    cancelled = store.enqueue(new_job())
    store.cancel(cancelled.id)

    assert store.replay(ReplayFilter(ids=(cancelled.id,)), by="bob") == [cancelled.id]
    assert store.get(cancelled.id).state is JobState.QUEUED


def test_replay_never_touches_queued_running_or_succeeded_jobs(store, db: Database):
    store.enqueue_many([new_job("queued"), new_job("running"), new_job("succeeded")])
    claim_one(store, kinds=["running"])
    store.complete(claim_one(store, kinds=["succeeded"]).lease, {"ok": 1})
    ids = tuple(uuid.UUID(str(r["id"])) for r in db.rows("SELECT id FROM jobs"))
    before = db.rows("SELECT * FROM jobs ORDER BY id")

    assert store.replay(ReplayFilter(ids=ids, include_cancelled=True), by="bob") == []
    assert db.rows("SELECT * FROM jobs ORDER BY id") == before
    assert db.count("job_replays") == 0


def test_replay_is_scoped_to_a_tenant_when_given_one(store):
    acme = _failed_job(store, tenant="acme")
    globex = _failed_job(store, tenant="globex")

    assert store.replay(ReplayFilter(tenant="acme"), by="bob") == [acme.id]
    assert store.get(globex.id).state is JobState.FAILED


def test_replay_since_takes_jobs_that_failed_since_then(store, clock: FakeClock):
    _failed_job(store, "old")
    clock.advance(3600)
    recent = _failed_job(store, "recent")

    since = clock.now() - timedelta(minutes=1)
    assert store.replay(ReplayFilter(since=since), by="bob") == [recent.id]


def test_handing_back_a_job_whose_cancel_was_requested_cancels_it(store, db: Database, clock: FakeClock):
    """A worker shutting down releases its jobs; one the user asked to stop must not run again.
    fail() and reap() already end such a job cancelled; release() must too."""
    store.enqueue(new_job())
    job = claim_one(store, "worker-a")
    store.cancel(job.id)

    store.release(job.lease)

    status = store.get(job.id)
    assert status.state is JobState.CANCELLED
    assert store.claim("worker-b", ["default"], 10, 30) == []


def test_replay_of_one_failure_group_takes_exactly_the_jobs_failure_groups_counted(store, clock: FakeClock):
    """The console's "replay this group": the group failure_groups names, whatever ids and numbers its errors hold."""
    rows = [_failed_job(store, "resize", f"ValueError: row {n} has {n + 3} columns") for n in (8, 17)]
    _failed_job(store, "resize", "KeyError: 'width'")
    _failed_job(store, "transcribe", "ValueError: row 1 has 2 columns")  # the same group text, another kind
    [group] = [g for g in store.failure_groups(clock.now() - timedelta(hours=1)) if g.kind == "resize" and g.count == 2]

    which = ReplayFilter(kind=group.kind, error_group=group.error_group)
    assert sorted(store.replay(which, by="console:alice", dry_run=True)) == sorted(r.id for r in rows)
    assert sorted(store.replay(which, by="console:alice")) == sorted(r.id for r in rows)
    assert {store.get(r.id).state for r in rows} == {JobState.QUEUED}
    assert store.replay(which, by="console:alice") == []  # replayed: the group is empty now


def test_make_due_runs_a_waiting_job_now_and_refuses_any_other(store, clock: FakeClock):
    waiting = store.enqueue(new_job(delay_seconds=3600))
    due = store.enqueue(new_job(queue="elsewhere"))
    assert store.claim("worker-a", ["default"], 1, 30) == []
    made = store.make_due(waiting.id)
    assert made.run_after == clock.now() and made.state == "queued" and made.attempts == 0
    [claimed] = store.claim("worker-a", ["default"], 1, 30)
    assert claimed.id == waiting.id
    for job_id in (waiting.id, due.id):  # running; due already
        with pytest.raises(InvalidTransition):
            store.make_due(job_id)
