"""Migration 0008 on a database that already holds history: no row lost, the rollup
backfilled, and back down again.

PostgreSQL: six weeks of synthetic history (tests/analysts/synthetic.py) written at
0007, then upgraded. SQLite: jobs driven through the store an hour ago, then upgraded.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from service.store.migrate import downgrade, upgrade
from tests.analysts.synthetic import fill
from tests.conftest import Database, FakeClock, PostgresServer, build_store, sqlite_url_for
from tests.store.builders import claim_one, fail_job, new_job

BEFORE = "0007"  # the revision before the rollup
ROLLUP_TABLES = ("job_daily_rollup", "job_daily_histogram", "rollup_watermark")

# Per day: how many rows, and a checksum of their ids (order-independent: the ids sorted).
JOBS_PER_DAY = """
SELECT (created_at AT TIME ZONE 'UTC')::date AS day, count(*) AS jobs,
       md5(string_agg(id::text, ',' ORDER BY id)) AS ids
FROM jobs GROUP BY 1 ORDER BY 1
"""
ATTEMPTS_PER_DAY = """
SELECT (started_at AT TIME ZONE 'UTC')::date AS day, count(*) AS attempts,
       md5(string_agg(job_id::text || ':' || claim, ',' ORDER BY job_id, claim)) AS ids
FROM job_attempts GROUP BY 1 ORDER BY 1
"""
OTHER_COUNTS = (
    "SELECT (SELECT count(*) FROM job_results), (SELECT count(*) FROM job_items), (SELECT count(*) FROM job_replays)"
)

# What the rollup must hold: every terminal job up to the watermark, per day and kind.
FOLDED_FROM_JOBS = """
SELECT (finished_at AT TIME ZONE 'UTC')::date AS day, kind,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'failed') AS failed,
       count(*) FILTER (WHERE state = 'cancelled') AS cancelled
FROM jobs
WHERE state IN ('succeeded', 'failed', 'cancelled')
  AND (finished_at, id) <= (SELECT finished_at, job_id FROM rollup_watermark)
GROUP BY 1, 2 ORDER BY 1, 2
"""
FROM_ROLLUP = """
SELECT day, kind, sum(succeeded) AS succeeded, sum(failed) AS failed, sum(cancelled) AS cancelled
FROM daily_jobs GROUP BY 1, 2 ORDER BY 1, 2
"""


@pytest.fixture
def history_before_rollup(postgres_server: PostgresServer) -> Iterator[str]:
    name = postgres_server.new_name("rollup_migration")
    url = postgres_server.create_database(name)
    try:
        upgrade(url, BEFORE)
        with psycopg.connect(url, autocommit=True) as conn:
            [(end,)] = conn.execute("SELECT now()").fetchall()
        fill(url, jobs=20_000, days=42, end=end)
        yield url
    finally:
        postgres_server.drop_database(name)


def snapshot(url: str) -> tuple[Any, ...]:
    with psycopg.connect(url, autocommit=True) as conn:
        return tuple(conn.execute(sql).fetchall() for sql in (JOBS_PER_DAY, ATTEMPTS_PER_DAY, OTHER_COUNTS))


def tables(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()
    return {name for (name,) in rows}


@pytest.mark.slow
def test_history_upgrades_to_the_rollup_without_losing_a_row_and_downgrades(history_before_rollup: str):
    url = history_before_rollup
    before = snapshot(url)
    assert len(before[0]) >= 42 and sum(jobs for _, jobs, _ in before[0]) == 20_000

    upgrade(url)
    assert snapshot(url) == before
    with psycopg.connect(url, autocommit=True) as conn:
        expected = conn.execute(FOLDED_FROM_JOBS).fetchall()
        assert conn.execute(FROM_ROLLUP).fetchall() == expected
        [(folded,)] = conn.execute("SELECT sum(finished) FROM daily_jobs").fetchall()
        [(waits,)] = conn.execute("SELECT sum(jobs) FROM daily_queue_wait").fetchall()
    # Backfilled: everything but the last minute's jobs (folded later by the workers).
    assert 19_000 < folded <= 20_000 and 0.9 * folded < waits <= folded

    downgrade(url, BEFORE)
    assert not tables(url) & set(ROLLUP_TABLES)
    assert snapshot(url) == before
    upgrade(url)
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(FROM_ROLLUP).fetchall() == conn.execute(FOLDED_FROM_JOBS).fetchall()


def test_a_sqlite_database_with_history_is_backfilled_by_the_upgrade(tmp_path: Path):
    url = sqlite_url_for(tmp_path / "history.db")
    upgrade(url)  # the history is written by today's store, then the schema goes back to before the rollup
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1))
    store = build_store(url, clock=clock)
    try:
        for _ in range(3):
            store.enqueue(new_job("ocr"))
        clock.advance(2)
        store.complete(claim_one(store).lease, None)
        fail_job(store, claim_one(store), "ValueError: no", retryable=False)
    finally:
        store.close()
    downgrade(url, BEFORE)
    db = Database(url)
    try:
        jobs_before = db.rows("SELECT id, state FROM jobs ORDER BY id")
        upgrade(url)
        assert db.rows("SELECT id, state FROM jobs ORDER BY id") == jobs_before
        [row] = db.rows("SELECT kind, finished, succeeded, failed FROM daily_jobs")
        assert row == {"kind": "ocr", "finished": 2, "succeeded": 1, "failed": 1}
        [wait] = db.rows("SELECT queue, jobs, p50_wait_seconds FROM daily_queue_wait")
        assert (wait["queue"], wait["jobs"]) == ("default", 2)
        assert wait["p50_wait_seconds"] == pytest.approx(2, rel=0.1)
        downgrade(url, BEFORE)
        assert db.rows("SELECT id, state FROM jobs ORDER BY id") == jobs_before
    finally:
        db.close()
