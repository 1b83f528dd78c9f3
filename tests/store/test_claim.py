"""Claiming: which jobs, in which order, and what a claim writes."""

from __future__ import annotations

from datetime import timedelta, timezone

from service.jobs import JobState
from tests.conftest import Database, FakeClock
from tests.store.builders import LEASE_SECONDS, claim_one, new_job


def test_claim_takes_higher_priority_first_then_earlier_run_after(store, clock: FakeClock):
    now = clock.now()
    low_old = store.enqueue(new_job("low-old", priority=1, run_after=now - timedelta(minutes=10)))
    high_new = store.enqueue(new_job("high-new", priority=9, run_after=now - timedelta(minutes=1)))
    high_old = store.enqueue(new_job("high-old", priority=9, run_after=now - timedelta(minutes=5)))
    mid = store.enqueue(new_job("mid", priority=5, run_after=now - timedelta(minutes=20)))

    order = [claim_one(store).id for _ in range(4)]

    assert order == [high_old.id, high_new.id, mid.id, low_old.id]
    assert store.claim("worker-a", ["default"], 10, LEASE_SECONDS) == []


def test_a_batch_claim_takes_the_first_jobs_in_claim_order(store, clock: FakeClock):
    jobs = store.enqueue_many([new_job(f"p{p}", priority=p) for p in (3, 0, 8, 5, 1)])
    by_priority = {s.priority: s.id for s in jobs}

    claimed = store.claim("worker-a", ["default"], 3, LEASE_SECONDS)

    assert {c.id for c in claimed} == {by_priority[8], by_priority[5], by_priority[3]}
    assert len(store.claim("worker-b", ["default"], 10, LEASE_SECONDS)) == 2


def test_a_job_is_not_claimed_before_its_run_after(store, clock: FakeClock):
    later = store.enqueue(new_job(run_after=clock.now() + timedelta(seconds=60)))

    assert store.claim("worker-a", ["default"], 10, LEASE_SECONDS) == []
    clock.advance(59.999)
    assert store.claim("worker-a", ["default"], 10, LEASE_SECONDS) == []
    clock.advance(0.001)
    assert claim_one(store).id == later.id


def test_a_delayed_job_waits_for_its_delay(store, clock: FakeClock):
    delayed = store.enqueue(new_job(delay_seconds=30))
    now_job = store.enqueue(new_job("now"))

    assert claim_one(store).id == now_job.id
    assert store.claim("worker-a", ["default"], 10, LEASE_SECONDS) == []
    clock.advance(30)
    assert claim_one(store).id == delayed.id


def test_claim_takes_only_the_queues_it_is_given(store):
    store.enqueue(new_job("in-default"))
    email = store.enqueue(new_job("in-email", queue="email"))
    sms = store.enqueue(new_job("in-sms", queue="sms"))

    claimed = store.claim("worker-a", ["email", "sms"], 10, LEASE_SECONDS)

    assert {c.id for c in claimed} == {email.id, sms.id}
    assert {c.queue for c in claimed} == {"email", "sms"}
    assert store.claim("worker-a", ["nowhere"], 10, LEASE_SECONDS) == []
    assert claim_one(store).kind == "in-default"


def test_claim_takes_only_the_kinds_it_is_given(store):
    store.enqueue_many([new_job("resize"), new_job("transcribe"), new_job("embed")])

    claimed = store.claim("worker-a", ["default"], 10, LEASE_SECONDS, kinds=["embed", "resize"])

    assert sorted(c.kind for c in claimed) == ["embed", "resize"]
    assert store.claim("worker-a", ["default"], 10, LEASE_SECONDS, kinds=["resize"]) == []
    assert claim_one(store, kinds=None).kind == "transcribe"


def test_has_claimable_is_true_only_for_due_queued_jobs_of_the_queues_and_kinds(store, clock: FakeClock):
    """The idle worker's probe answers what the claim would find, without claiming it."""
    assert not store.has_claimable(["default"])  # an empty queue
    store.enqueue(new_job("resize", queue="email", delay_seconds=60))
    store.enqueue(new_job("transcribe", queue="email"))
    cancelled = store.enqueue(new_job("resize", queue="sms"))
    store.cancel(cancelled.id)

    assert not store.has_claimable(["default"])  # another queue's jobs
    assert not store.has_claimable(["sms"])  # a cancelled job is never claimable
    assert store.has_claimable(["default", "email"])
    assert store.has_claimable(["email"], kinds=["transcribe"])
    assert not store.has_claimable(["email"], kinds=["resize"])  # not due for another 60 s
    assert not store.has_claimable(["email"], kinds=["embed"])  # no job of that kind

    clock.advance(60)
    assert store.has_claimable(["email"], kinds=["resize"])  # due now
    claimed = store.claim("worker-a", ["email"], 10, LEASE_SECONDS)
    assert len(claimed) == 2
    assert not store.has_claimable(["email"])  # running jobs are not claimable
    assert store.claim("worker-a", ["email"], 10, LEASE_SECONDS) == []


def test_claim_marks_the_job_running_with_a_lease_and_opens_an_attempt(store, db: Database, clock: FakeClock):
    queued = store.enqueue(
        new_job("transcribe", payload={"url": "s3://b/k"}, queue="audio", tenant="acme", total=12, max_attempts=4)
    )

    job = claim_one(store, "worker-7", queues=("audio",), lease_seconds=45)

    assert job.id == queued.id
    assert (job.lease.owner, job.lease.attempt, job.attempt) == ("worker-7", 1, 1)
    assert (job.kind, job.queue, job.tenant) == ("transcribe", "audio", "acme")
    assert job.payload == {"url": "s3://b/k"}
    assert (job.checkpoint, job.done, job.total, job.max_attempts) == (None, 0, 12, 4)
    assert job.lease_expires_at == clock.now() + timedelta(seconds=45)

    status = store.get(job.id)
    assert status.state is JobState.RUNNING
    assert (status.attempts, status.lease_owner) == (1, "worker-7")
    assert status.lease_expires_at == clock.now() + timedelta(seconds=45)
    assert status.started_at == clock.now() == status.updated_at
    assert status.stale is False

    [attempt] = db.attempts(job.id)
    assert (attempt["attempt"], attempt["worker"]) == (1, "worker-7")
    assert attempt["started_at"] == clock.now()
    assert (attempt["finished_at"], attempt["outcome"], attempt["error"]) == (None, None, None)


def test_a_running_job_is_not_claimed_again(store, db: Database):
    store.enqueue(new_job())
    claim_one(store, "worker-a")

    assert store.claim("worker-b", ["default"], 10, LEASE_SECONDS) == []
    assert db.count("job_attempts") == 1


def test_claim_takes_no_more_than_its_limit(store):
    store.enqueue_many([new_job(payload={"i": i}) for i in range(5)])

    assert len(store.claim("worker-a", ["default"], 2, LEASE_SECONDS)) == 2
    assert len(store.claim("worker-a", ["default"], 2, LEASE_SECONDS)) == 2
    assert len(store.claim("worker-a", ["default"], 2, LEASE_SECONDS)) == 1
    assert store.claim("worker-a", ["default"], 2, LEASE_SECONDS) == []


def test_cancelled_and_finished_jobs_are_never_claimed(store):
    cancelled = store.enqueue(new_job("cancelled"))
    store.cancel(cancelled.id)
    store.enqueue(new_job("done"))
    store.complete(claim_one(store).lease, {"ok": True})

    assert store.claim("worker-a", ["default"], 10, LEASE_SECONDS) == []


def test_a_run_after_in_another_time_zone_is_the_same_instant(store, clock: FakeClock):
    tokyo = timezone(timedelta(hours=9))
    at = (clock.now() + timedelta(seconds=60)).astimezone(tokyo)
    status = store.enqueue(new_job(run_after=at))

    assert status.run_after == at
    assert store.claim("worker-a", ["default"], 1, LEASE_SECONDS) == []
    clock.advance(60)
    assert claim_one(store).id == status.id
