"""Leadership as a worker's maintenance uses it, on both stores with a pinned clock: one leader,
takeover after the lease, logs on gaining and losing, and a deposed leader's duties write nothing."""

from __future__ import annotations

import logging
import random
from datetime import timedelta

import pytest

from service.errors import LeadershipLost
from service.jobs import JobQuery, JobState
from service.maintenance.leadership import RENEW_JITTER, Leadership
from service.maintenance.reaper import Reaper
from service.maintenance.scheduler import Scheduler
from service.schedules import ScheduleSpec
from service.store import Store
from tests.conftest import FakeClock
from tests.store.builders import claim_one, new_job

LEASE = 15.0


def candidate(store: Store, owner: str, clock: FakeClock) -> Leadership:
    """A candidate whose own clock runs with the database's (a host in sync)."""
    return Leadership(
        store, owner, lease_seconds=LEASE, monotonic=lambda: clock.now().timestamp(), rng=random.Random(7)
    )


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, object]]:
    return [r.jobq_fields for r in caplog.records if r.getMessage() == name]  # type: ignore[attr-defined]


def test_one_candidate_leads_and_renews_a_third_of_a_lease_apart(store, clock: FakeClock):
    a, b = candidate(store, "worker-a", clock), candidate(store, "worker-b", clock)

    assert a.run_once() is True
    assert b.run_once() is False
    assert (a.is_leader(), b.is_leader()) == (True, False)
    assert LEASE / 3 * (1 - RENEW_JITTER) <= a.next_interval() <= LEASE / 3 * (1 + RENEW_JITTER)
    # The candidate comes back when the holder's lease ends, not before, and not much after.
    assert LEASE <= b.next_interval() <= LEASE * (1 + RENEW_JITTER)


def test_a_silent_leader_is_replaced_after_its_lease_and_each_side_logs_once(
    store, clock: FakeClock, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="jobq.maintenance")
    a, b = candidate(store, "worker-a", clock), candidate(store, "worker-b", clock)
    a.run_once()
    clock.advance(LEASE / 3)
    a.run_once()  # a renewal: no second "gained"
    clock.advance(LEASE)  # worker-a stops renewing (killed, stopped, partitioned)

    assert a.is_leader() is False  # by its own clock, before the store says so
    assert b.run_once() is True and b.token().term == 2
    assert a.run_once() is False
    assert a.run_once() is False

    assert [(e["owner"], e["term"]) for e in events(caplog, "leadership.gained")] == [("worker-a", 1), ("worker-b", 2)]
    assert [(e["owner"], e["term"]) for e in events(caplog, "leadership.lost")] == [("worker-a", 1)]


def test_a_resigned_leader_is_succeeded_at_once(store, clock: FakeClock):
    a, b = candidate(store, "worker-a", clock), candidate(store, "worker-b", clock)
    a.run_once()

    a.resign()

    assert a.is_leader() is False
    assert b.run_once() is True


def test_a_duty_of_a_worker_that_does_not_lead_writes_nothing(store, clock: FakeClock):
    a, b = candidate(store, "worker-a", clock), candidate(store, "worker-b", clock)
    a.run_once()
    b.run_once()
    store.enqueue(new_job())
    job = claim_one(store, lease_seconds=1)
    clock.advance(2)

    with pytest.raises(LeadershipLost):
        Reaper(store, leader=b.token).run_once()
    assert store.get(job.id).state is JobState.RUNNING
    assert Reaper(store, leader=a.token).run_once().requeued == 1


def test_a_partitioned_leader_that_still_believes_it_leads_is_fenced_by_the_store(store, clock: FakeClock):
    frozen = clock.now().timestamp()  # its clock stopped with it (SIGSTOP): it believes its lease holds
    stale = Leadership(store, "worker-a", lease_seconds=LEASE, monotonic=lambda: frozen)
    stale.run_once()
    spec = ScheduleSpec(name="beat", cron="* * * * * *", kind="tick", payload={})
    due = store.save_schedule(spec, clock.now() + timedelta(seconds=LEASE)).next_run_at
    clock.advance(LEASE)
    successor = candidate(store, "worker-b", clock)
    assert successor.run_once() is True

    assert stale.is_leader() is True
    with pytest.raises(LeadershipLost) as refused:
        Scheduler(store, leader=stale.token).run_once()
    stale.lost(refused.value)
    assert stale.is_leader() is False

    # The schedule did not move. The tick's job may exist (its enqueue is not fenced; see the
    # report): it is under the tick's idempotency key, so the successor's firing finds it.
    [schedule] = store.list_schedules()
    assert schedule.next_run_at == due
    assert Scheduler(store, leader=successor.token).run_once().fired == 1
    assert len(store.list_jobs(JobQuery(tenant=None)).items) == 1
