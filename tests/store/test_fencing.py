"""Invariant 1: a worker that lost its lease changes nothing.

Worker A claims, stops heartbeating (paused, partitioned), its lease expires, the
reaper requeues the job and worker B claims it. Then A wakes up. Every write A
makes must report the lost lease and leave B's job exactly as B has it.
"""

from __future__ import annotations

import dataclasses

import pytest

from service.errors import LeaseLost
from service.jobs import Heartbeat, JobState, Lease, ReplayFilter
from service.retry import GiveUp, Retry
from tests.conftest import Database, FakeClock
from tests.store.builders import claim_one, fail_job, new_job, reap


@pytest.fixture
def zombie_and_owner(store, clock: FakeClock):
    store.enqueue(new_job(total=100, max_attempts=5))
    zombie = claim_one(store, "worker-a", lease_seconds=10)
    clock.advance(11)
    assert reap(store).requeued == 1
    clock.advance(3600)
    owner = claim_one(store, "worker-b", lease_seconds=60)
    store.heartbeat(owner.lease, 60, done=30, checkpoint={"from": "B"})
    assert (owner.id, owner.attempt) == (zombie.id, 2)
    return zombie, owner


def _snapshot(db: Database, job_id) -> tuple:
    return (
        db.job(job_id),
        db.attempts(job_id),
        db.rows("SELECT * FROM job_results ORDER BY id"),
    )


def test_a_zombie_heartbeat_is_told_it_lost_the_lease_and_writes_nothing(store, db, zombie_and_owner):
    zombie, owner = zombie_and_owner
    before = _snapshot(db, owner.id)

    beat = store.heartbeat(zombie.lease, 600, done=99, total=100, checkpoint={"from": "A"})

    assert beat == Heartbeat(held=False, cancel_requested=False)
    assert beat.must_stop
    assert _snapshot(db, owner.id) == before


def test_a_zombie_cannot_complete_a_job_another_worker_holds(store, db, zombie_and_owner):
    zombie, owner = zombie_and_owner
    before = _snapshot(db, owner.id)

    with pytest.raises(LeaseLost) as raised:
        store.complete(zombie.lease, {"from": "A"})

    assert (raised.value.job_id, raised.value.attempt) == (zombie.id, 1)
    assert _snapshot(db, owner.id) == before


@pytest.mark.parametrize("retryable", [True, False])
def test_a_zombie_cannot_fail_a_job_another_worker_holds(store, db, zombie_and_owner, retryable):
    zombie, owner = zombie_and_owner
    before = _snapshot(db, owner.id)

    with pytest.raises(LeaseLost):
        fail_job(store, zombie, "error from A", retryable=retryable)

    assert _snapshot(db, owner.id) == before


def test_a_zombie_cannot_release_a_job_another_worker_holds(store, db, zombie_and_owner):
    zombie, owner = zombie_and_owner
    before = _snapshot(db, owner.id)

    with pytest.raises(LeaseLost):
        store.release(zombie.lease)

    assert _snapshot(db, owner.id) == before


def test_a_zombie_cannot_acknowledge_a_cancel_on_a_job_another_worker_holds(store, db, zombie_and_owner):
    zombie, owner = zombie_and_owner
    store.cancel(owner.id)
    before = _snapshot(db, owner.id)

    with pytest.raises(LeaseLost):
        store.acknowledge_cancel(zombie.lease)

    assert _snapshot(db, owner.id) == before


def test_after_the_zombie_tried_everything_the_job_is_the_owners(store, db, zombie_and_owner):
    zombie, owner = zombie_and_owner

    assert store.heartbeat(zombie.lease, 600, done=99, checkpoint={"from": "A"}).held is False
    for write in (
        lambda: store.complete(zombie.lease, {"from": "A"}),
        lambda: fail_job(store, zombie, "error from A", retryable=True),
        lambda: fail_job(store, zombie, "error from A", retryable=False),
        lambda: store.release(zombie.lease),
    ):
        with pytest.raises(LeaseLost):
            write()

    status = store.get(owner.id)
    assert (status.state, status.lease_owner, status.attempts, status.done) == (JobState.RUNNING, "worker-b", 2, 30)
    assert db.job(owner.id)["checkpoint"] == {"from": "B"}
    assert status.error is not None and "from A" not in status.error  # the reaper's note, not A's
    store.complete(owner.lease, {"from": "B"})
    assert store.get_result(owner.id) == {"from": "B"}
    assert [(a["worker"], a["outcome"]) for a in db.attempts(owner.id)] == [
        ("worker-a", "lease_expired"),
        ("worker-b", "succeeded"),
    ]


def test_a_zombie_cannot_write_once_the_job_has_finished(store, db, zombie_and_owner):
    zombie, owner = zombie_and_owner
    store.complete(owner.lease, {"from": "B"})
    before = _snapshot(db, owner.id)

    assert store.heartbeat(zombie.lease, 60, done=1).held is False
    with pytest.raises(LeaseLost):
        store.complete(zombie.lease, {"from": "A"})
    with pytest.raises(LeaseLost):
        fail_job(store, zombie, "late", retryable=False)
    assert _snapshot(db, owner.id) == before


def test_a_reaped_lease_is_lost_even_before_anyone_reclaims_the_job(store, db: Database, clock: FakeClock):
    store.enqueue(new_job())
    job = claim_one(store, "worker-a", lease_seconds=10)
    clock.advance(11)
    reap(store)
    before = _snapshot(db, job.id)

    assert store.heartbeat(job.lease, 10).held is False
    with pytest.raises(LeaseLost):
        store.complete(job.lease, "late")
    assert _snapshot(db, job.id) == before


def test_a_lease_of_one_owner_is_not_valid_for_another_owner_name(store, db: Database):
    store.enqueue(new_job())
    job = claim_one(store, "worker-a")
    forged = dataclasses.replace(job.lease, owner="worker-z")
    before = _snapshot(db, job.id)

    assert store.heartbeat(forged, 30).held is False
    with pytest.raises(LeaseLost):
        store.complete(forged, "forged")
    assert _snapshot(db, job.id) == before


def test_a_token_from_before_a_replay_never_matches_the_new_claim(store, db: Database, clock: FakeClock):
    """A worker process runs many slots under one worker id. Slot 1's handler hangs;
    its lease expires and the job fails. An operator replays it, and slot 2 of the same
    process claims it again. The hung handler's token must not hold the new claim."""
    store.enqueue(new_job(max_attempts=1))
    hung = claim_one(store, "worker-a", lease_seconds=10)
    clock.advance(11)
    assert reap(store).failed == 1
    store.replay(ReplayFilter(ids=(hung.id,)), by="operator")
    fresh = claim_one(store, "worker-a", lease_seconds=60)
    before = _snapshot(db, fresh.id)

    assert fresh.lease != hung.lease, "the fencing token repeats: attempts went back to 0 on replay"
    with pytest.raises(LeaseLost):
        store.complete(hung.lease, {"from": "the hung handler"})
    assert _snapshot(db, fresh.id) == before


WRITES = {
    "heartbeat": lambda store, lease: store.heartbeat(lease, 600, done=9, checkpoint={"from": "old"}),
    "complete": lambda store, lease: store.complete(lease, {"from": "old"}),
    "fail-retryable": lambda store, lease: store.fail(lease, "old", Retry(0.0)),
    "fail-permanent": lambda store, lease: store.fail(lease, "old", GiveUp()),
    "release": lambda store, lease: store.release(lease),
    "acknowledge-cancel": lambda store, lease: store.acknowledge_cancel(lease),
}


def _running_with_cancel_requested(store):
    """A running job whose cancel was requested, so every write would be a real change."""
    store.enqueue(new_job(max_attempts=3, total=10))
    job = claim_one(store, "worker-a", lease_seconds=60)
    store.cancel(job.id)
    return job


def _refused(store, db: Database, job, forged: Lease, write: str) -> str | None:
    """None if the write with ``forged`` changed nothing and reported the lost lease, else what went wrong."""
    before = _snapshot(db, job.id)
    try:
        outcome = WRITES[write](store, forged)
    except LeaseLost:
        pass
    else:
        if write != "heartbeat":
            return f"{write} with {forged} did not report the lost lease"
        if outcome.held:
            return f"heartbeat with {forged} answered held=True"
    if _snapshot(db, job.id) != before:
        return f"{write} with {forged} changed the job"
    return None


@pytest.mark.parametrize("field", ["owner", "attempt", "claim"])
def test_every_write_is_fenced_on_each_part_of_the_token(store, db: Database, field):
    """A token that differs from the holder's in any one part, the others equal, writes nothing."""
    problems = []
    for write in WRITES:
        job = _running_with_cancel_requested(store)
        lease = job.lease
        changed = {"owner": "worker-z", "attempt": lease.attempt + 1, "claim": lease.claim + 1}[field]
        problems.append(_refused(store, db, job, dataclasses.replace(lease, **{field: changed}), write))
        store.acknowledge_cancel(lease)  # the real holder still holds it: the forged write took nothing
    assert [p for p in problems if p] == []


def test_the_same_worker_claiming_again_does_not_revive_its_old_token(store, db: Database, clock: FakeClock):
    """Worker A lost a job and claimed it again: its token from the first claim writes nothing."""
    problems = []
    for write in WRITES:
        store.enqueue(new_job(kind=write, max_attempts=3, total=10))
        old = claim_one(store, "worker-a", kinds=[write], lease_seconds=10)
        clock.advance(11)
        reap(store)
        clock.advance(3600)
        new = claim_one(store, "worker-a", kinds=[write], lease_seconds=60)
        store.cancel(new.id)
        assert (new.lease.owner, new.attempt) == ("worker-a", 2)
        problems.append(_refused(store, db, new, old.lease, write))
    assert [p for p in problems if p] == []


def test_a_released_token_writes_nothing_once_another_worker_holds_the_job(store, db: Database):
    """Released jobs give their attempt back, so the new holder has the old attempt number."""
    problems = []
    for write in WRITES:
        store.enqueue(new_job(kind=write, max_attempts=3, total=10))
        old = claim_one(store, "worker-a", kinds=[write])
        store.release(old.lease)
        new = claim_one(store, "worker-b", kinds=[write])
        store.cancel(new.id)
        assert new.attempt == old.attempt
        if write == "release":
            # The old token's own release did land: repeating it answers from that receipt.
            before = _snapshot(db, new.id)
            store.release(old.lease)
            if _snapshot(db, new.id) != before:
                problems.append("a repeated release changed the new holder's job")
        else:
            problems.append(_refused(store, db, new, old.lease, write))
    assert [p for p in problems if p] == []
