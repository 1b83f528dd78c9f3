"""Reaping: a running job past its lease is reclaimed (invariant 2)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from service.jobs import LEASE_EXPIRED_GROUP, JobState, ReapResult, lease_expired_error
from service.retry import RetryPolicy
from tests.conftest import Database, FakeClock
from tests.store.builders import claim_one, new_job, reap


def test_a_live_lease_is_not_reaped(store, clock: FakeClock):
    store.enqueue(new_job())
    job = claim_one(store, lease_seconds=30)
    clock.advance(30)  # expiry is strict: a lease that ends now is still held

    assert reap(store) == ReapResult()
    assert store.get(job.id).state is JobState.RUNNING


def test_an_expired_lease_with_attempts_left_goes_back_to_the_queue(
    make_store, store_url, db: Database, clock: FakeClock
):
    store = make_store(store_url, clock=clock)
    store.enqueue(new_job(max_attempts=3))
    job = claim_one(store, "worker-a", lease_seconds=30)
    clock.advance(31)

    assert reap(store, RetryPolicy(4, 60)) == ReapResult(requeued=1)

    status = store.get(job.id)
    assert (status.state, status.attempts) == (JobState.QUEUED, 1)
    assert status.lease_owner is None and status.lease_expires_at is None and status.finished_at is None
    assert status.run_after == clock.now()  # due at once: the lease was the wait (RetryPolicy.delays_by_attempt)
    assert "lease expired" in status.error
    [attempt] = db.attempts(job.id)
    assert (attempt["outcome"], attempt["finished_at"]) == ("lease_expired", clock.now())
    assert "lease expired" in attempt["error"]


def test_an_expired_lease_is_reclaimed_by_another_worker(store, db: Database, clock: FakeClock):
    store.enqueue(new_job())
    first = claim_one(store, "worker-a", lease_seconds=30)
    clock.advance(31)
    reap(store)
    clock.advance(3600)

    second = claim_one(store, "worker-b")

    assert (second.id, second.attempt, second.lease.owner) == (first.id, 2, "worker-b")
    assert [(a["worker"], a["outcome"]) for a in db.attempts(first.id)] == [
        ("worker-a", "lease_expired"),
        ("worker-b", None),
    ]


def test_an_expired_lease_on_the_last_attempt_fails_the_job_saying_so(store, db: Database, clock: FakeClock):
    store.enqueue(new_job(max_attempts=2))
    claim_one(store, "worker-a", lease_seconds=10)
    clock.advance(11)
    reap(store)
    clock.advance(3600)
    last = claim_one(store, "worker-b", lease_seconds=10)
    clock.advance(11)

    assert reap(store) == ReapResult(failed=1)

    status = store.get(last.id)
    assert (status.state, status.attempts) == (JobState.FAILED, 2)
    assert "lease expired" in status.error
    assert "2 time" in status.error  # how many times, so a crash-looping job is recognisable
    assert status.finished_at == clock.now()
    assert [a["outcome"] for a in db.attempts(last.id)] == ["lease_expired", "lease_expired"]
    assert store.claim("worker-c", ["default"], 10, 30) == []


def test_both_stores_write_the_one_lease_expired_error_the_domain_words(store, db: Database, clock: FakeClock):
    store.enqueue(new_job(max_attempts=3))
    claim_one(store, "worker-a", lease_seconds=10)
    clock.advance(11)
    reap(store)
    clock.advance(3600)
    second = claim_one(store, "worker-b", lease_seconds=10)
    clock.advance(11)
    reap(store)

    status = store.get(second.id)
    assert status.error == lease_expired_error(2, 2, 3, "worker-b")
    assert status.error.startswith("lease expired 2 time(s); last on attempt 2 of 3 (worker worker-b ")
    assert [a["error"] for a in db.attempts(second.id)] == [LEASE_EXPIRED_GROUP, LEASE_EXPIRED_GROUP]


def test_reaping_a_job_whose_cancel_was_requested_cancels_it(store, db: Database, clock: FakeClock):
    store.enqueue(new_job())
    job = claim_one(store, lease_seconds=10)
    store.cancel(job.id)
    clock.advance(11)

    assert reap(store) == ReapResult(cancelled=1)
    assert store.get(job.id).state is JobState.CANCELLED
    assert [a["outcome"] for a in db.attempts(job.id)] == ["lease_expired"]


def test_reaping_twice_reaps_once(store, db: Database, clock: FakeClock):
    store.enqueue_many([new_job(payload={"i": i}) for i in range(3)])
    store.claim("worker-a", ["default"], 3, 10)
    clock.advance(11)

    assert reap(store).requeued == 3
    assert reap(store) == ReapResult()
    assert db.count("job_attempts", "outcome = 'lease_expired'") == 3


def test_reap_takes_at_most_its_limit_per_call(store, clock: FakeClock):
    store.enqueue_many([new_job(payload={"i": i}) for i in range(5)])
    store.claim("worker-a", ["default"], 5, 10)
    clock.advance(11)

    assert reap(store, limit=2).total == 2
    assert reap(store, limit=2).total == 2
    assert reap(store, limit=2).total == 1
    assert reap(store, limit=2).total == 0


def test_reap_leaves_queued_and_finished_jobs_alone(store, db: Database, clock: FakeClock):
    store.enqueue_many([new_job("queued"), new_job("done")])
    done = claim_one(store, kinds=["done"], lease_seconds=10)
    store.complete(done.lease, None)
    before = db.rows("SELECT * FROM jobs ORDER BY id")
    clock.advance(3600)

    assert reap(store) == ReapResult()
    assert db.rows("SELECT * FROM jobs ORDER BY id") == before


def test_reapers_running_at_once_reap_each_job_once(make_store, store_url, db: Database, clock: FakeClock):
    """Every worker runs the reaper; several at the same moment must not double-reap."""
    stores = [make_store(store_url, clock=clock) for _ in range(4)]
    stores[0].enqueue_many([new_job(payload={"i": i}) for i in range(40)])
    stores[0].claim("worker-a", ["default"], 40, 10)
    clock.advance(11)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda s: [reap(s, limit=7) for _ in range(8)], stores))

    assert sum(r.total for rounds in results for r in rounds) == 40
    assert db.count("jobs", "state = 'queued'") == 40
    assert db.count("job_attempts", "outcome = 'lease_expired'") == 40
