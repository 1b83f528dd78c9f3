"""A worker's check-in on both stores (Store.check_in): one statement that marks it alive, takes
or renews the leadership like acquire_leadership, counts the peers an idle worker spreads its
polls by, and says when the next schedule is due (service.maintenance.presence)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from service.errors import InvalidInput
from service.jobs import NewJob, WorkerInfo
from service.schedules import ScheduleSpec
from service.store import Store
from service.store.base import MAINTENANCE, LeaderLease
from tests.conftest import FakeClock
from tests.store.builders import claim_one

LEASE, ALIVE = 10.0, 45.0


def register(store: Store, worker_id: str, queues: tuple[str, ...] = ("default",), concurrency: int = 1) -> None:
    store.register_worker(
        WorkerInfo(id=worker_id, host="h", pid=1, queues=queues, kinds=("noop",), concurrency=concurrency)
    )


def test_a_check_in_marks_the_worker_alive_and_takes_a_free_leadership(store, clock: FakeClock):
    register(store, "w1")
    clock.advance(ALIVE + 1)
    assert store.list_workers(ALIVE) == []

    answer = store.check_in("w1", MAINTENANCE, LEASE, ALIVE)

    assert [w.id for w in store.list_workers(ALIVE)] == ["w1"]
    assert answer.lease == LeaderLease(MAINTENANCE, "w1", 1, clock.now(), clock.now() + timedelta(seconds=LEASE))
    assert (answer.free_in, answer.peers, answer.next_schedule_in) == (0.0, 1, None)
    assert store.current_leader() == answer.lease


def test_a_candidates_check_in_learns_when_the_holders_lease_ends_and_renews_nothing(store, clock: FakeClock):
    register(store, "w1")
    register(store, "w2")
    held = store.check_in("w1", MAINTENANCE, LEASE, ALIVE).lease
    clock.advance(4)

    answer = store.check_in("w2", MAINTENANCE, LEASE, ALIVE)

    assert answer.lease is None and answer.free_in == pytest.approx(LEASE - 4, abs=0.01)
    assert store.current_leader() == held
    clock.advance(LEASE - 4)  # the holder's lease ended unrenewed: the next check-in takes it, term 2
    taken = store.check_in("w2", MAINTENANCE, LEASE, ALIVE).lease
    assert taken is not None and (taken.owner, taken.term) == ("w2", 2)


def test_peers_are_the_live_workers_sharing_a_queue_with_a_slot_free(store, clock: FakeClock):
    register(store, "w1", ("default", "gpu"))
    register(store, "w2", ("gpu",))
    register(store, "w3", ("default",))
    register(store, "w4", ("email",))  # shares no queue
    register(store, "gone", ("default",))
    clock.advance(ALIVE + 1)
    for worker in ("w1", "w2", "w3", "w4"):
        store.check_in(worker, MAINTENANCE, LEASE, ALIVE)
    assert store.check_in("w1", MAINTENANCE, LEASE, ALIVE).peers == 3  # itself, w2, w3: not w4 nor "gone"

    assert store.check_in("w1", MAINTENANCE, LEASE, ALIVE).jobs_running is False  # the reaper may rest
    store.enqueue(NewJob(kind="noop"))
    claim_one(store, "w3")  # w3's only slot is taken: its polls stop, it spreads nobody's
    answer = store.check_in("w1", MAINTENANCE, LEASE, ALIVE)
    assert (answer.peers, answer.jobs_running) == (2, True)
    assert store.check_in("w4", MAINTENANCE, LEASE, ALIVE).peers == 1


def test_a_check_in_says_when_the_next_unpaused_schedule_is_due(store, clock: FakeClock):
    register(store, "w1")
    spec = ScheduleSpec(name="soon", cron="* * * * *", kind="noop")
    store.save_schedule(spec, clock.now() + timedelta(seconds=30))
    store.save_schedule(ScheduleSpec(name="later", cron="* * * * *", kind="noop"), clock.now() + timedelta(hours=1))

    assert store.check_in("w1", MAINTENANCE, LEASE, ALIVE).next_schedule_in == pytest.approx(30, abs=0.01)
    store.set_schedule_paused("soon", True)
    assert store.check_in("w1", MAINTENANCE, LEASE, ALIVE).next_schedule_in == pytest.approx(3600, abs=0.01)


def test_a_check_in_refuses_a_liveness_window_that_is_not_positive(store):
    with pytest.raises(InvalidInput):
        store.check_in("w1", MAINTENANCE, LEASE, 0)
