"""Heartbeats: one statement renews the lease and records progress."""

from __future__ import annotations

from datetime import timedelta

from service.jobs import Heartbeat
from tests.conftest import Database, FakeClock
from tests.store.builders import claim_one, new_job, reap


def test_heartbeat_extends_the_lease_from_the_store_clock(store, clock: FakeClock):
    store.enqueue(new_job())
    job = claim_one(store, lease_seconds=30)
    clock.advance(25)

    beat = store.heartbeat(job.lease, 30)

    assert beat == Heartbeat(held=True, cancel_requested=False)
    assert beat.must_stop is False
    status = store.get(job.id)
    assert status.lease_expires_at == clock.now() + timedelta(seconds=30)
    assert status.updated_at == clock.now()
    clock.advance(29)
    assert reap(store).total == 0
    assert store.get(job.id).stale is False


def test_heartbeat_writes_progress_and_checkpoint(store, db: Database):
    store.enqueue(new_job(total=10))
    job = claim_one(store)

    store.heartbeat(job.lease, 30, done=4, checkpoint={"next_item": 4, "partial": [1, 2]})

    row = db.job(job.id)
    assert (row["done"], row["total"]) == (4, 10)
    assert row["checkpoint"] == {"next_item": 4, "partial": [1, 2]}
    status = store.get(job.id)
    assert (status.done, status.total) == (4, 10)


def test_heartbeat_without_progress_keeps_the_last_progress(store, db: Database):
    store.enqueue(new_job())
    job = claim_one(store)
    store.heartbeat(job.lease, 30, done=3, total=8, checkpoint={"at": 3})

    store.heartbeat(job.lease, 30)

    row = db.job(job.id)
    assert (row["done"], row["total"], row["checkpoint"]) == (3, 8, {"at": 3})


def test_heartbeat_can_set_a_total_learned_while_running(store):
    store.enqueue(new_job())
    job = claim_one(store)

    store.heartbeat(job.lease, 30, done=0, total=250)
    store.heartbeat(job.lease, 30, done=100)

    status = store.get(job.id)
    assert (status.done, status.total) == (100, 250)


def test_heartbeat_tells_the_worker_its_job_was_cancelled(store):
    store.enqueue(new_job())
    job = claim_one(store)
    store.cancel(job.id)

    beat = store.heartbeat(job.lease, 30, done=1)

    assert beat == Heartbeat(held=True, cancel_requested=True)
    assert beat.must_stop is True


def test_a_reclaimed_job_resumes_from_its_checkpoint(store, clock: FakeClock):
    store.enqueue(new_job(total=100))
    first = claim_one(store, "worker-a", lease_seconds=10)
    store.heartbeat(first.lease, 10, done=40, checkpoint={"next_item": 40})
    clock.advance(11)
    reap(store)
    clock.advance(3600)  # past any retry backoff

    second = claim_one(store, "worker-b")

    assert second.id == first.id
    assert second.attempt == 2
    assert (second.checkpoint, second.done, second.total) == ({"next_item": 40}, 40, 100)


def test_any_json_value_is_a_checkpoint(store, clock: FakeClock):
    checkpoints = [7, 2.5, "item-7", [7, 8], {"next": 7}, True]
    store.enqueue_many([new_job(payload={"i": i}) for i in range(len(checkpoints))])
    first = store.claim("worker-a", ["default"], len(checkpoints), 10)
    for job, checkpoint in zip(first, checkpoints, strict=True):
        store.heartbeat(job.lease, 10, checkpoint=checkpoint)
    clock.advance(11)
    reap(store)
    clock.advance(3600)

    resumed = {job.id: job.checkpoint for job in store.claim("worker-b", ["default"], len(checkpoints), 30)}

    assert [resumed[job.id] for job in first] == checkpoints
