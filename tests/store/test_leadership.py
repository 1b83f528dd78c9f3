"""The leadership lease on both stores: one holder at a time, takeover only after expiry with
the next term, and every maintenance write of a deposed leader refused whole (LeadershipLost)."""

from __future__ import annotations

import multiprocessing
import random
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from service.errors import InvalidInput, LeadershipLost
from service.jobs import JobState
from service.maintenance.rollup import BUCKET_BOUNDS, BUCKET_SECONDS
from service.schedules import ScheduleSpec
from service.store import Store, checks
from service.store.base import MAINTENANCE, LeaderLease
from service.store.postgres import PostgresStore
from service.store.postgres.leadership import CHECK_LEADER
from tests.conftest import Database, FakeClock
from tests.store.builders import DEFAULT_POLICY, claim_one, new_job

LEASE = 10.0


def acquire(store: Store, owner: str, lease_seconds: float = LEASE) -> LeaderLease | None:
    lease, _free_in = store.acquire_leadership(MAINTENANCE, owner, lease_seconds)
    return lease


def test_a_free_leadership_is_taken_with_term_one_and_then_held_against_others(store, clock: FakeClock):
    first = acquire(store, "worker-a")

    assert first == LeaderLease(MAINTENANCE, "worker-a", 1, clock.now(), clock.now() + timedelta(seconds=LEASE))
    assert acquire(store, "worker-b") is None
    assert store.current_leader() == first


def test_a_candidate_learns_when_the_holders_lease_ends(store, clock: FakeClock):
    acquire(store, "worker-a")
    clock.advance(4)

    assert store.acquire_leadership(MAINTENANCE, "worker-b", LEASE) == (
        None,
        pytest.approx(LEASE - 4, abs=0.01),
    )  # julianday: ms


def test_the_holder_renews_keeping_its_term(store, clock: FakeClock):
    first = acquire(store, "worker-a")
    clock.advance(LEASE - 1)

    renewed = acquire(store, "worker-a")

    assert renewed is not None and first is not None
    assert (renewed.term, renewed.acquired_at) == (1, first.acquired_at)
    assert renewed.expires_at == clock.now() + timedelta(seconds=LEASE)


def test_another_candidate_takes_over_only_once_the_lease_ended_with_the_next_term(store, clock: FakeClock):
    acquire(store, "worker-a")
    clock.advance(LEASE - 0.001)
    assert acquire(store, "worker-b") is None

    clock.advance(0.001)  # the lease ends at its expiry: held before it, free from it on
    taken = acquire(store, "worker-b")

    assert taken is not None and (taken.owner, taken.term, taken.acquired_at) == ("worker-b", 2, clock.now())
    assert store.current_leader() == taken


def test_a_deposed_leader_cannot_renew(store, clock: FakeClock):
    acquire(store, "worker-a")
    clock.advance(LEASE)
    successor = acquire(store, "worker-b")

    assert acquire(store, "worker-a") is None
    assert store.current_leader() == successor


def test_a_holder_whose_lease_ran_out_takes_it_again_with_a_new_term(store, clock: FakeClock):
    acquire(store, "worker-a")
    clock.advance(LEASE + 5)
    assert store.current_leader() is None

    again = acquire(store, "worker-a")

    assert again is not None and again.term == 2  # its term-1 token stays refused


def test_resigning_frees_the_leadership_at_once_and_terms_keep_growing(store, clock: FakeClock):
    first = acquire(store, "worker-a")
    assert first is not None

    assert store.resign_leadership(first) is True
    assert store.current_leader() is None
    successor = acquire(store, "worker-b")

    assert successor is not None and successor.term == 2
    assert store.resign_leadership(first) is False  # a resignation of a term already over changes nothing
    assert store.current_leader() == successor


def test_leadership_arguments_are_checked(store):
    for name, owner, lease in (("", "worker-a", LEASE), (MAINTENANCE, " ", LEASE), (MAINTENANCE, "worker-a", 0)):
        with pytest.raises(InvalidInput):
            store.acquire_leadership(name, owner, lease)


# -- a deposed leader's maintenance writes change nothing -------------------------------------


def deposed_and_successor(store: Store, clock: FakeClock) -> tuple[LeaderLease, LeaderLease]:
    """worker-a led until its lease ran out; worker-b leads now, for an hour."""
    deposed = acquire(store, "worker-a")
    clock.advance(LEASE)
    successor = acquire(store, "worker-b", 3600)
    assert deposed is not None and successor is not None
    return deposed, successor


def test_a_reap_with_a_stale_token_changes_nothing(store, clock: FakeClock):
    store.enqueue(new_job())
    job = claim_one(store, lease_seconds=1)
    deposed, successor = deposed_and_successor(store, clock)
    delays = DEFAULT_POLICY.delays_by_attempt()

    with pytest.raises(LeadershipLost):
        store.reap(delays, leader=deposed)
    assert store.get(job.id).state is JobState.RUNNING

    assert store.reap(delays, leader=successor).requeued == 1


def test_a_schedule_fire_with_a_stale_token_leaves_the_schedule_unmoved(store, clock: FakeClock):
    spec = ScheduleSpec(name="beat", cron="* * * * * *", kind="tick", payload={})
    due = store.save_schedule(spec, clock.now()).next_run_at
    deposed, successor = deposed_and_successor(store, clock)
    later = due + timedelta(seconds=60)

    with pytest.raises(LeadershipLost):
        store.advance_schedule("beat", due, later, leader=deposed)
    [schedule] = store.list_schedules()
    assert schedule.next_run_at == due

    assert store.advance_schedule("beat", due, later, leader=successor) is True


def finished_job(store: Store) -> None:
    store.enqueue(new_job())
    store.complete(claim_one(store).lease, {"ok": True})


def test_a_prune_with_a_stale_token_deletes_nothing(store, db: Database, clock: FakeClock):
    finished_job(store)
    clock.advance(3600)
    deposed, successor = deposed_and_successor(store, clock)

    with pytest.raises(LeadershipLost):
        store.prune(60, leader=deposed)
    assert db.count("jobs") == 1

    assert store.prune(60, leader=successor) == 1


def test_a_rollup_prune_with_a_stale_token_deletes_nothing(store, db: Database, clock: FakeClock):
    db.execute(
        "INSERT INTO job_daily_rollup (day, tenant, queue, kind, succeeded, failed, cancelled, retried,"
        " retried_twice, attempts, run_seconds) VALUES ('2029-01-01', 't', 'q', 'k', 1, 0, 0, 0, 0, 1, 1.0)"
    )
    deposed, successor = deposed_and_successor(store, clock)

    with pytest.raises(LeadershipLost):
        store.prune_rollup(86_400, leader=deposed)
    assert db.count("job_daily_rollup") == 1

    assert store.prune_rollup(86_400, leader=successor) == 1


def test_a_fold_with_a_stale_token_folds_nothing(store, db: Database, clock: FakeClock):
    finished_job(store)
    clock.advance(120)
    deposed, successor = deposed_and_successor(store, clock)

    with pytest.raises(LeadershipLost):
        store.fold_rollup(BUCKET_BOUNDS, BUCKET_SECONDS, 60.0, leader=deposed)
    assert db.count("job_daily_rollup") == 0
    assert db.scalar("SELECT job_id FROM rollup_watermark WHERE name = 'daily'") is None

    assert store.fold_rollup(BUCKET_BOUNDS, BUCKET_SECONDS, 60.0, leader=successor) == 1


def test_a_leader_whose_lease_ran_out_writes_nothing_even_before_a_successor(store, db: Database, clock: FakeClock):
    finished_job(store)
    clock.advance(3600)
    lapsed = acquire(store, "worker-a")
    assert lapsed is not None
    clock.advance(LEASE)

    with pytest.raises(LeadershipLost):
        store.prune(60, leader=lapsed)
    assert db.count("jobs") == 1


def test_a_takeover_waits_for_a_fenced_write_in_flight(make_store, pg_url: str, clock: FakeClock):
    """The fence's lock, on PostgreSQL: a leader's write that passed CHECK_LEADER commits before
    any successor's term begins, however long it runs past the lease."""
    store = make_store(pg_url, clock=clock)
    leader = acquire(store, "worker-a")
    assert leader is not None
    with psycopg.connect(pg_url) as in_flight:  # a fenced write's transaction, between its check and its commit
        held = in_flight.execute(CHECK_LEADER, {"now": clock.now(), **checks.leader_token(leader)}).fetchone()
        assert held is not None
        clock.advance(LEASE)
        with ThreadPoolExecutor(1) as pool:
            takeover = pool.submit(acquire, store, "worker-b")
            time.sleep(0.5)
            assert not takeover.done()  # waiting for the write's transaction
            in_flight.commit()
            successor = takeover.result(timeout=10)
    assert successor is not None and successor.term == 2


# -- many processes racing for it over real PostgreSQL -----------------------------------------

RACE_SECONDS = 4.0
RACE_LEASE = 0.3


def _race(url: str, owner: str, seed: int, start: Any, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """Acquire and renew as a leader does, sometimes going silent past the lease (a partition),
    and report every lease the store handed out: (term, owner, acquired_at, expires_at)."""
    rng = random.Random(seed)
    store = PostgresStore(url, pool_size=1)
    got: list[tuple[int, str, datetime, datetime]] = []
    start.wait(timeout=60)  # every racer connected: they race from the same moment
    deadline = time.monotonic() + RACE_SECONDS
    try:
        while time.monotonic() < deadline:
            lease, _free_in = store.acquire_leadership(MAINTENANCE, owner, RACE_LEASE)
            if lease is not None:
                got.append((lease.term, lease.owner, lease.acquired_at, lease.expires_at))
                if rng.random() < 0.2:
                    time.sleep(RACE_LEASE * 1.5)  # silent past its lease: another must take over
            time.sleep(rng.uniform(0, RACE_LEASE / 6))
    finally:
        store.close()
        results.put(got)


@pytest.mark.timeout(120)
def test_racing_processes_never_hold_overlapping_terms(pg_url: str):
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    start = context.Barrier(8)
    racers = [context.Process(target=_race, args=(pg_url, f"racer-{n}", n, start, results)) for n in range(8)]
    for racer in racers:
        racer.start()
    leases = [lease for _ in racers for lease in results.get(timeout=90)]
    for racer in racers:
        racer.join(timeout=30)

    terms: dict[int, tuple[str, datetime, datetime]] = {}
    for term, owner, acquired_at, expires_at in leases:
        held = terms.setdefault(term, (owner, acquired_at, expires_at))
        assert (held[0], held[1]) == (owner, acquired_at), f"term {term} handed to two owners"
        terms[term] = (owner, acquired_at, max(held[2], expires_at))
    ordered = sorted(terms.items())
    assert len(ordered) >= 3, f"too few takeovers to prove anything: {len(ordered)} terms"
    for (term, (_, _, until)), (following, (_, since, _)) in zip(ordered, ordered[1:], strict=False):
        assert following > term
        assert until <= since, f"term {term} held until {until}, term {following} began at {since}"
