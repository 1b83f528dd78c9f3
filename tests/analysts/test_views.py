"""The analysts' read model on both stores: job_history and attempt_history, as jobs really move.

Jobs are driven through the store API with a pinned clock (enqueue, claim,
complete, fail, reap, cancel, replay), then read back through the views, so
every duration below is exact.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from alembic import command

from service.jobs import JobState, ReplayFilter
from service.store.migrate import alembic_config, downgrade, upgrade
from tests.conftest import Database, FakeClock
from tests.store.builders import claim_one, fail_job, new_job, reap

JOB_HISTORY_COLUMNS = [
    "job_id", "tenant", "queue", "kind", "state", "attempts", "max_attempts", "claims", "priority", "done", "total",
    "created_at", "started_at", "finished_at", "queue_wait_seconds", "run_seconds", "error", "error_group",
    "result_id", "result", "replay_count", "last_replayed_at", "workflow_id",
]  # fmt: skip
ATTEMPT_HISTORY_COLUMNS = [
    "attempt_id", "job_id", "tenant", "queue", "kind", "claim", "attempt", "worker", "due_at", "started_at",
    "finished_at", "pickup_seconds", "run_seconds", "outcome", "error",
]  # fmt: skip

LEASE = 30.0


def history(db: Database, job_id: Any) -> dict[str, Any]:
    row = db.one("SELECT * FROM job_history WHERE job_id = %(id)s", id=job_id)
    if db.dialect == "sqlite" and row["result"] is not None:  # SQLite hands JSON back as text
        row["result"] = json.loads(row["result"])
    return row


def attempts(db: Database, job_id: Any) -> list[dict[str, Any]]:
    return db.rows("SELECT * FROM attempt_history WHERE job_id = %(id)s ORDER BY attempt_id", id=job_id)


def columns(db: Database, view: str) -> list[str]:
    return list(db.rows(f"SELECT * FROM {view}")[0])  # the views' names are ours


def test_the_views_have_the_documented_columns(store, db: Database):
    job = store.enqueue(new_job())
    claim_one(store)

    assert columns(db, "job_history") == JOB_HISTORY_COLUMNS
    assert columns(db, "attempt_history") == ATTEMPT_HISTORY_COLUMNS
    assert db.count("job_history") == 1 and history(db, job.id)["state"] == "running"


def test_a_job_that_waited_ran_and_succeeded(store, db: Database, clock: FakeClock):
    created = clock.now()
    job = store.enqueue(new_job("resize", tenant="acme", queue="images", priority=5, total=4))
    clock.advance(5)
    claimed = claim_one(store, "worker-a", queues=("images",))
    clock.advance(2.5)
    store.complete(claimed.lease, {"url": "s3://out/cat.png", "bytes": 1234})

    row = history(db, job.id)
    assert (row["tenant"], row["queue"], row["kind"], row["state"]) == ("acme", "images", "resize", "succeeded")
    assert (row["attempts"], row["max_attempts"], row["claims"], row["priority"]) == (1, 3, 1, 5)
    assert (row["done"], row["total"]) == (4, 4)
    assert row["created_at"] == created
    assert row["started_at"] == created + _seconds(5)
    assert row["finished_at"] == clock.now()
    assert row["queue_wait_seconds"] == pytest.approx(5.0, abs=1e-3)
    assert row["run_seconds"] == pytest.approx(2.5, abs=1e-3)
    assert row["error"] is None and row["error_group"] is None
    assert row["result_id"] == str(store.get(job.id).result_id)
    assert row["result"] == {"url": "s3://out/cat.png", "bytes": 1234}
    assert (row["replay_count"], row["last_replayed_at"]) == (0, None)

    [attempt] = attempts(db, job.id)
    assert (attempt["tenant"], attempt["queue"], attempt["kind"]) == ("acme", "images", "resize")
    assert (attempt["claim"], attempt["attempt"], attempt["worker"], attempt["outcome"], attempt["error"]) == (
        1, 1, "worker-a", "succeeded", None)  # fmt: skip
    assert attempt["due_at"] == created and attempt["started_at"] == created + _seconds(5)
    assert attempt["pickup_seconds"] == pytest.approx(5.0, abs=1e-3)
    assert attempt["run_seconds"] == pytest.approx(2.5, abs=1e-3)


def test_retries_then_a_permanent_failure(store, db: Database, clock: FakeClock):
    created = clock.now()
    job = store.enqueue(new_job(max_attempts=3))
    clock.advance(1)
    first = claim_one(store, "worker-a")
    clock.advance(3)
    retry = fail_job(store, first, "TimeoutError: upstream did not answer in 30 s", retryable=True)
    assert retry.state is JobState.QUEUED and retry.run_after is not None
    clock.set(retry.run_after)
    clock.advance(2)  # due, then two seconds until a worker is free
    second = claim_one(store, "worker-b")
    clock.advance(4)
    fail_job(store, second, "ValueError: bad input 17", retryable=False)

    row = history(db, job.id)
    assert (row["state"], row["attempts"], row["claims"]) == ("failed", 2, 2)
    assert row["error"] == "ValueError: bad input 17"
    assert row["error_group"] == "ValueError: bad input N"
    # Waited one second before its first start; the run is the last attempt's.
    assert row["queue_wait_seconds"] == pytest.approx(1.0, abs=1e-3)
    assert row["run_seconds"] == pytest.approx(4.0, abs=1e-3)
    assert row["result_id"] is None and row["result"] is None

    one, two = attempts(db, job.id)
    assert (one["claim"], one["attempt"], one["worker"], one["outcome"]) == (1, 1, "worker-a", "failed")
    assert one["error"] == "TimeoutError: upstream did not answer in 30 s"
    assert one["pickup_seconds"] == pytest.approx(1.0, abs=1e-3)
    assert one["run_seconds"] == pytest.approx(3.0, abs=1e-3)
    assert (two["claim"], two["attempt"], two["worker"], two["outcome"]) == (2, 2, "worker-b", "failed")
    assert two["due_at"] == retry.run_after
    assert two["pickup_seconds"] == pytest.approx(2.0, abs=1e-3)
    assert two["run_seconds"] == pytest.approx(4.0, abs=1e-3)
    assert two["started_at"] == retry.run_after + _seconds(2)
    assert one["started_at"] == created + _seconds(1)


def test_a_reclaimed_attempt_shows_as_lease_expired(store, db: Database, clock: FakeClock):
    job = store.enqueue(new_job(max_attempts=2))
    claim_one(store, "worker-dead", lease_seconds=LEASE)
    clock.advance(LEASE + 1)
    assert reap(store).requeued == 1
    status = store.get(job.id)
    clock.set(status.run_after)
    again = claim_one(store, "worker-b")
    clock.advance(3)
    store.complete(again.lease, "ok")

    row = history(db, job.id)
    assert (row["state"], row["attempts"], row["result"]) == ("succeeded", 2, "ok")
    assert row["queue_wait_seconds"] == pytest.approx(0.0, abs=1e-3)  # its first attempt started at once
    assert row["run_seconds"] == pytest.approx(3.0, abs=1e-3)
    reclaimed, succeeded = attempts(db, job.id)
    assert (reclaimed["worker"], reclaimed["outcome"], reclaimed["error"]) == (
        "worker-dead", "lease_expired", "lease expired")  # fmt: skip
    assert reclaimed["run_seconds"] == pytest.approx(LEASE + 1, abs=1e-3)
    assert (succeeded["worker"], succeeded["outcome"]) == ("worker-b", "succeeded")


def test_a_job_handed_back_at_shutdown_keeps_its_first_wait(store, db: Database, clock: FakeClock):
    job = store.enqueue(new_job())
    clock.advance(3)
    first = claim_one(store, "worker-stopping")
    clock.advance(10)
    store.release(first.lease)  # SIGTERM: handed back, the attempt not charged
    clock.advance(1)
    second = claim_one(store, "worker-b")
    clock.advance(2)
    store.complete(second.lease, None)

    row = history(db, job.id)
    assert (row["state"], row["attempts"], row["claims"]) == ("succeeded", 1, 2)
    assert row["queue_wait_seconds"] == pytest.approx(3.0, abs=1e-3)
    assert row["run_seconds"] == pytest.approx(2.0, abs=1e-3)
    released, succeeded = attempts(db, job.id)
    assert (released["claim"], released["attempt"], released["outcome"]) == (1, 1, "released")
    assert released["run_seconds"] == pytest.approx(10.0, abs=1e-3)
    assert (succeeded["claim"], succeeded["attempt"], succeeded["outcome"]) == (2, 1, "succeeded")
    assert succeeded["pickup_seconds"] == pytest.approx(1.0, abs=1e-3)  # due again at the release


def test_jobs_that_never_finished_or_never_ran(store, db: Database, clock: FakeClock):
    waiting = store.enqueue(new_job(delay_seconds=60))
    cancelled = store.enqueue(new_job())
    clock.advance(10)
    store.cancel(cancelled.id)

    row = history(db, waiting.id)
    assert (row["state"], row["attempts"], row["started_at"], row["finished_at"]) == ("queued", 0, None, None)
    assert row["queue_wait_seconds"] is None and row["run_seconds"] is None
    row = history(db, cancelled.id)
    assert (row["state"], row["started_at"], row["finished_at"]) == ("cancelled", None, clock.now())
    assert row["queue_wait_seconds"] is None and row["run_seconds"] is None
    assert db.count("attempt_history") == 0


def test_a_replayed_job_counts_its_replays_and_keeps_its_first_wait(store, db: Database, clock: FakeClock):
    job = store.enqueue(new_job(max_attempts=1))
    clock.advance(7)
    first = claim_one(store)
    fail_job(store, first, "KeyError: 'segment_3'", retryable=False)
    clock.advance(60)
    replayed_at = clock.now()
    assert store.replay(ReplayFilter(ids=(job.id,)), by="ops") == [job.id]
    clock.advance(1)
    second = claim_one(store, "worker-b")
    clock.advance(2)
    store.complete(second.lease, {"ok": True})

    row = history(db, job.id)
    assert (row["state"], row["attempts"], row["claims"], row["result"]) == ("succeeded", 1, 2, {"ok": True})
    assert (row["replay_count"], row["last_replayed_at"]) == (1, replayed_at)
    assert row["queue_wait_seconds"] == pytest.approx(7.0, abs=1e-3)  # before its first start ever
    assert row["run_seconds"] == pytest.approx(2.0, abs=1e-3)
    # The replay reset the attempt count, never the claim number.
    assert [(a["claim"], a["attempt"], a["outcome"]) for a in attempts(db, job.id)] == [
        (1, 1, "failed"), (2, 1, "succeeded")]  # fmt: skip


def test_every_job_is_one_row_of_job_history(store, db: Database, clock: FakeClock):
    for _ in range(3):
        store.enqueue(new_job())
    for worker in ("worker-a", "worker-b"):
        job = claim_one(store, worker)
        fail_job(store, job, "boom", retryable=True)
    store.replay(ReplayFilter(ids=()), by="nobody", dry_run=True)

    assert db.count("job_history") == db.count("jobs") == 3
    assert db.count("attempt_history") == db.count("job_attempts") == 2


def test_downgrade_drops_the_views_and_upgrade_brings_them_back(store_url: str, db: Database):
    downgrade(store_url, "0002")
    assert not _views(db)
    upgrade(store_url)
    assert _views(db) == [
        "attempt_history",
        "daily_histogram",
        "daily_jobs",
        "daily_queue_wait",
        "daily_run_time",
        "job_dependencies",
        "job_history",
        "job_item_history",
    ]


@pytest.mark.postgres_only(reason="alembic check compares the PostgreSQL schema")
def test_migrations_and_metadata_agree_with_the_views_in_place(store_url: str):
    # Raises AutogenerateDiffsDetected when the database and schema.py differ.
    command.check(alembic_config(store_url))


def _views(db: Database) -> list[str]:
    if db.dialect == "sqlite":
        sql = "SELECT name FROM sqlite_master WHERE type = 'view' ORDER BY name"
    else:
        sql = "SELECT table_name AS name FROM information_schema.views WHERE table_schema = current_schema() ORDER BY 1"
    return [row["name"] for row in db.rows(sql)]


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)
