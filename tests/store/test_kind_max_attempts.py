"""A kind's max_attempts (its handler's) is the default of a job enqueued without one and a
ceiling on a job's own: the claim writes it into the job, so the retry decision, the reaper
and the status all read one number. Both stores."""

from __future__ import annotations

from service.jobs import JobState
from tests.conftest import Database, FakeClock
from tests.store.builders import LEASE_SECONDS, new_job, reap

KINDS = {"resize": 5}


def test_a_job_without_max_attempts_takes_its_kinds_at_claim(store, db: Database):
    job = store.enqueue(new_job("resize"))
    assert job.max_attempts == 3  # what it shows until a worker of the kind claims it

    [claimed] = store.claim("worker-a", ["default"], 1, LEASE_SECONDS, max_attempts=KINDS)

    assert claimed.max_attempts == 5
    assert db.job(job.id)["max_attempts"] == 5
    assert store.get(job.id).max_attempts == 5


def test_a_jobs_own_max_attempts_is_capped_by_its_kinds_and_kept_under_it(store):
    above = store.enqueue(new_job("resize", max_attempts=10, priority=2))
    below = store.enqueue(new_job("resize", max_attempts=2, priority=1))
    other = store.enqueue(new_job("crop"))

    claimed = store.claim("worker-a", ["default"], 3, LEASE_SECONDS, max_attempts=KINDS)

    assert {job.id: job.max_attempts for job in claimed} == {above.id: 5, below.id: 2, other.id: 3}


def test_without_the_kinds_the_job_keeps_its_own(store):
    store.enqueue(new_job("resize", max_attempts=7))
    [claimed] = store.claim("worker-a", ["default"], 1, LEASE_SECONDS)
    assert claimed.max_attempts == 7


def test_the_reaper_retries_up_to_the_kinds_default(store, clock: FakeClock):
    job = store.enqueue(new_job("resize"))
    for attempt in range(1, 6):
        [claimed] = store.claim("worker-a", ["default"], 1, LEASE_SECONDS, max_attempts=KINDS)
        assert claimed.attempt == attempt
        clock.advance(LEASE_SECONDS + 1)
        reap(store)
    status = store.get(job.id)
    assert (status.state, status.attempts, status.max_attempts) == (JobState.FAILED, 5, 5)
    assert "5 of 5" in (status.error or "")
