"""The daily rollup and the analysts' day-level views: daily_jobs, daily_histogram, daily_queue_wait, daily_run_time.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

Six weeks at 100,000 jobs a day is 4.2 million job rows; a question per day over six
weeks read all of them (1.1–1.3 s each at that size). The rollup keeps one row per UTC
day × tenant × queue × kind with the counts by outcome, and run-time and wait
histograms (log-spaced buckets, below), folded by the workers' maintenance from a
watermark (service.maintenance.rollup). Six weeks of it is a few thousand rows.

- ``job_daily_rollup``, ``job_daily_histogram``, ``rollup_watermark``: the tables.
- ``daily_jobs``: the rollup, one row per day × tenant × queue × kind.
- ``daily_histogram``: its histograms, one row per bucket that holds jobs, for percentiles
  over any window and grouping (docs/ANALYSTS.md, question 2, shows how).
- ``daily_queue_wait``: per day × queue, the first attempt's wait (pickup): median and p95.
- ``daily_run_time``: per day × kind, the run of succeeded jobs: median and p95.
- Partial indexes for the questions that still read the history: failed jobs by time and by
  tenant and time (``jobs``), reclaimed attempts by time (``job_attempts``, covering what
  questions 5 and 10 read). Only those rows enter them, so the hot path barely notices.
  A percentile is read from the histogram: the middle of the bucket where the
  cumulative count passes it (within ±9 % of the exact value).
  The views group first and number the buckets per (day, queue) or (day, kind) only, so a
  range of days given to the view reaches the primary key of the histogram.

The backfill folds every job that finished more than a minute ago, in this migration
(one statement; about a minute on 4.2 M jobs); the workers fold the rest. The
read-only role of deploy/analysts.sql is granted the three views (run it again after
this migration).

Frozen: the bucket bounds, the settle time and the fold's SQL below are copies of
service.maintenance.rollup and service/store/*/rollup.py as they stood at 8a4feb8, not
imports. Replayed on a fresh database, a migration must run the SQL of its moment against
the schema of its moment, whatever the live statements have become since; an import
contract in pyproject.toml keeps the migrations from importing service.
"""

from __future__ import annotations

import bisect
import json
import sqlite3

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

Id = sa.Uuid().with_variant(sa.String(36), "sqlite")
Timestamp = sa.DateTime(timezone=True).with_variant(sa.String(23), "sqlite")
Day = sa.Date().with_variant(sa.String(10), "sqlite")

SETTLE_SECONDS = 60.0
"""Jobs that finished less than this long ago are left to the workers' fold."""
_LOWEST = -24  # 2 ** (-24 / 4) = 1/64 s
_STEPS = 85  # up to 2 ** (60 / 4) s, about nine hours
BUCKET_BOUNDS = [2.0 ** ((_LOWEST + k) / 4) for k in range(_STEPS)]
"""Bucket ``i`` (``width_bucket``: how many bounds are <= the value) holds [bounds[i - 1], bounds[i])."""
BUCKET_SECONDS = [2.0 ** ((_LOWEST + i - 0.5) / 4) for i in range(_STEPS + 1)]
"""The geometric middle of each bucket (the two open-ended ones: as if they were as wide)."""

VIEWS = ("daily_jobs", "daily_histogram", "daily_queue_wait", "daily_run_time")

DAILY_JOBS = """
CREATE VIEW daily_jobs AS
SELECT day,
       tenant,
       queue,
       kind,
       succeeded + failed + cancelled AS finished,
       succeeded,
       failed,
       cancelled,
       retried,
       retried_twice,
       attempts,
       run_seconds
FROM job_daily_rollup
"""

DAILY_HISTOGRAM = """
CREATE VIEW daily_histogram AS
SELECT day, measure, tenant, queue, kind, seconds, jobs
FROM job_daily_histogram
"""


def percentile_view(name: str, measure: str, group: str) -> str:
    """Median and p95 of one histogram per day × ``group``: the first bucket whose running count reaches it."""
    return f"""
CREATE VIEW {name} AS
SELECT day,
       {group},
       max(total) AS jobs,
       min(CASE WHEN upto >= 0.5 * total THEN seconds END) AS p50_{measure}_seconds,
       min(CASE WHEN upto >= 0.95 * total THEN seconds END) AS p95_{measure}_seconds
FROM (
    SELECT day, {group}, seconds,
           sum(jobs) OVER (PARTITION BY day, {group} ORDER BY seconds) AS upto,
           sum(jobs) OVER (PARTITION BY day, {group}) AS total
    FROM (SELECT day, {group}, seconds, sum(jobs) AS jobs
          FROM job_daily_histogram
          WHERE measure = '{measure}'
          GROUP BY day, {group}, seconds) AS buckets
) AS running
GROUP BY day, {group}
"""


def upgrade() -> None:
    op.create_table(
        "job_daily_rollup",
        sa.Column("day", Day, nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("succeeded", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("cancelled", sa.Integer(), nullable=False),
        sa.Column("retried", sa.Integer(), nullable=False),
        sa.Column("retried_twice", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("run_seconds", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("day", "tenant", "queue", "kind", name=op.f("pk_job_daily_rollup")),
    )
    op.create_table(
        "job_daily_histogram",
        sa.Column("day", Day, nullable=False),
        sa.Column("measure", sa.Text(), nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.CheckConstraint("measure IN ('run','wait')", name=op.f("ck_job_daily_histogram_measure")),
        sa.PrimaryKeyConstraint(
            "day", "measure", "tenant", "queue", "kind", "bucket", name=op.f("pk_job_daily_histogram")
        ),
    )
    op.create_table(
        "rollup_watermark",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("finished_at", Timestamp, nullable=True),
        sa.Column("job_id", Id, nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_rollup_watermark")),
    )
    op.execute("INSERT INTO rollup_watermark (name) VALUES ('daily')")
    op.execute(DAILY_JOBS)
    op.execute(DAILY_HISTOGRAM)
    op.execute(percentile_view("daily_queue_wait", "wait", "queue"))
    op.execute(percentile_view("daily_run_time", "run", "kind"))
    _backfill()
    _create_history_indexes()


# Partial indexes for the questions that still read the history: failed jobs by time (and
# by tenant), reclaimed attempts by time. Built CONCURRENTLY on PostgreSQL: on a large
# history that takes a while, and workers and the API go on writing meanwhile.
HISTORY_INDEXES = {
    "ix_jobs_failed_finished_at": ("jobs", ["finished_at"], "state = 'failed'", None),
    "ix_jobs_failed_tenant_finished_at": ("jobs", ["tenant", "finished_at"], "state = 'failed'", None),
    "ix_job_attempts_lease_expired_finished_at": (
        "job_attempts", ["finished_at"], "outcome = 'lease_expired'", ["job_id", "worker"]),
}  # fmt: skip


def _create_history_indexes() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    with op.get_context().autocommit_block():
        for name, (table, columns, where, include) in HISTORY_INDEXES.items():
            op.create_index(
                name,
                table,
                columns,
                postgresql_where=sa.text(where),
                sqlite_where=sa.text(where),
                postgresql_include=include or [],
                postgresql_concurrently=postgres,
            )


def _backfill() -> None:
    """Fold every settled finished job (no limit: one pass), as the stores' fold did at this revision."""
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        params = {
            "now": None,
            "settle": SETTLE_SECONDS,
            "limit": None,
            "bounds": BUCKET_BOUNDS,
            "bucket_seconds": BUCKET_SECONDS,
        }
        bind.exec_driver_sql(FOLD_ROLLUP, params)
        op.execute("ANALYZE job_daily_rollup, job_daily_histogram")
    else:
        raw = bind.connection.driver_connection
        raw.create_function("width_bucket", 2, _width_bucket, deterministic=True)
        [(now,)] = raw.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')").fetchall()
        _fold_sqlite(raw, now)


# -- the fold on PostgreSQL: service/store/postgres/rollup.py's FOLD_ROLLUP at 8a4feb8 --

FOLD_ROLLUP = """
WITH mark AS (
    SELECT coalesce(finished_at, '-infinity') AS finished_at,
           coalesce(job_id, '00000000-0000-0000-0000-000000000000') AS job_id
    FROM rollup_watermark
    WHERE name = 'daily'
    FOR UPDATE SKIP LOCKED
),
batch AS (
    SELECT j.id, j.finished_at, j.tenant, j.queue, j.kind, j.state, j.attempts,
           (j.finished_at AT TIME ZONE 'UTC')::date AS day,
           CASE WHEN j.state IN ('succeeded', 'failed')
                THEN date_part('epoch', j.finished_at - j.started_at) END AS run_seconds,
           (SELECT date_part('epoch', a.started_at - a.due_at)
            FROM job_attempts AS a WHERE a.job_id = j.id AND a.claim = 1) AS wait_seconds
    FROM jobs AS j
    -- Scalar subqueries, evaluated once: the index scan starts at the watermark. (A join to
    -- mark scanned ix_jobs_finished_at from its first entry on every batch.)
    WHERE j.finished_at >= (SELECT finished_at FROM mark)
      AND (j.finished_at, j.id) > (SELECT finished_at, job_id FROM mark)
      AND j.finished_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(settle)s)
      AND j.state IN ('succeeded', 'failed', 'cancelled')
    ORDER BY j.finished_at, j.id
    LIMIT %(limit)s
),
counted AS (
    INSERT INTO job_daily_rollup AS r
           (day, tenant, queue, kind, succeeded, failed, cancelled, retried, retried_twice, attempts, run_seconds)
    SELECT day, tenant, queue, kind,
           count(*) FILTER (WHERE state = 'succeeded'),
           count(*) FILTER (WHERE state = 'failed'),
           count(*) FILTER (WHERE state = 'cancelled'),
           count(*) FILTER (WHERE state IN ('succeeded', 'failed') AND attempts > 1),
           count(*) FILTER (WHERE state IN ('succeeded', 'failed') AND attempts > 2),
           coalesce(sum(attempts) FILTER (WHERE state IN ('succeeded', 'failed')), 0),
           coalesce(sum(run_seconds), 0)
    FROM batch
    GROUP BY day, tenant, queue, kind
    ON CONFLICT (day, tenant, queue, kind) DO UPDATE
    SET succeeded = r.succeeded + excluded.succeeded,
        failed = r.failed + excluded.failed,
        cancelled = r.cancelled + excluded.cancelled,
        retried = r.retried + excluded.retried,
        retried_twice = r.retried_twice + excluded.retried_twice,
        attempts = r.attempts + excluded.attempts,
        run_seconds = r.run_seconds + excluded.run_seconds
),
bucketed AS (
    INSERT INTO job_daily_histogram AS h (day, measure, tenant, queue, kind, bucket, seconds, jobs)
    SELECT b.day, m.measure, b.tenant, b.queue, b.kind, m.bucket,
           (%(bucket_seconds)s::float8[])[m.bucket + 1], count(*)
    FROM batch AS b
    CROSS JOIN LATERAL (VALUES ('run', width_bucket(CASE WHEN b.state = 'succeeded' THEN b.run_seconds END,
                                                    %(bounds)s::float8[])),
                               ('wait', width_bucket(b.wait_seconds, %(bounds)s::float8[]))) AS m(measure, bucket)
    WHERE m.bucket IS NOT NULL
    GROUP BY b.day, m.measure, b.tenant, b.queue, b.kind, m.bucket
    ON CONFLICT (day, measure, tenant, queue, kind, bucket) DO UPDATE SET jobs = h.jobs + excluded.jobs
),
moved AS (
    UPDATE rollup_watermark AS w
    SET finished_at = last.finished_at, job_id = last.id
    FROM (SELECT finished_at, id FROM batch ORDER BY finished_at DESC, id DESC LIMIT 1) AS last
    WHERE w.name = 'daily'
)
SELECT count(*) AS folded FROM batch
"""


# -- the fold on SQLite: service/store/sqlite/rollup.py at 8a4feb8 (no data-modifying CTEs:
# four statements in the migration's transaction) --

_RANGE = """
finished_at >= :mark_at AND (finished_at, id) > (:mark_at, :mark_id) AND (finished_at, id) <= (:last_at, :last_id)
  AND state IN ('succeeded', 'failed', 'cancelled')
"""

MARK = """
SELECT coalesce(finished_at, '') AS finished_at, coalesce(job_id, '') AS job_id
FROM rollup_watermark WHERE name = 'daily'
"""

# The next batch past the watermark, in (finished_at, id) order, settled for :settle seconds.
BATCH_KEYS = """
SELECT finished_at, id
FROM jobs
WHERE finished_at >= :mark_at AND (finished_at, id) > (:mark_at, :mark_id)
  AND finished_at < strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :settle || ' seconds')
  AND state IN ('succeeded', 'failed', 'cancelled')
ORDER BY finished_at, id
LIMIT :limit
"""

FOLD_COUNTS = f"""
INSERT INTO job_daily_rollup (day, tenant, queue, kind, succeeded, failed, cancelled, retried, retried_twice, attempts,
                              run_seconds)
SELECT substr(finished_at, 1, 10), tenant, queue, kind,
       count(*) FILTER (WHERE state = 'succeeded'),
       count(*) FILTER (WHERE state = 'failed'),
       count(*) FILTER (WHERE state = 'cancelled'),
       count(*) FILTER (WHERE state IN ('succeeded', 'failed') AND attempts > 1),
       count(*) FILTER (WHERE state IN ('succeeded', 'failed') AND attempts > 2),
       coalesce(sum(attempts) FILTER (WHERE state IN ('succeeded', 'failed')), 0),
       coalesce(sum((julianday(finished_at) - julianday(started_at)) * 86400.0)
                FILTER (WHERE state IN ('succeeded', 'failed')), 0)
FROM jobs
WHERE {_RANGE}
GROUP BY substr(finished_at, 1, 10), tenant, queue, kind
ON CONFLICT (day, tenant, queue, kind) DO UPDATE
SET succeeded = succeeded + excluded.succeeded,
    failed = failed + excluded.failed,
    cancelled = cancelled + excluded.cancelled,
    retried = retried + excluded.retried,
    retried_twice = retried_twice + excluded.retried_twice,
    attempts = attempts + excluded.attempts,
    run_seconds = run_seconds + excluded.run_seconds
"""

FOLD_HISTOGRAMS = f"""
INSERT INTO job_daily_histogram (day, measure, tenant, queue, kind, bucket, seconds, jobs)
SELECT day, measure, tenant, queue, kind, bucket, json_extract(:bucket_seconds, '$[' || bucket || ']'), count(*)
FROM (
    SELECT substr(finished_at, 1, 10) AS day, 'run' AS measure, tenant, queue, kind,
           width_bucket((julianday(finished_at) - julianday(started_at)) * 86400.0, :bounds) AS bucket
    FROM jobs
    WHERE {_RANGE} AND state = 'succeeded'
    UNION ALL
    SELECT substr(j.finished_at, 1, 10), 'wait', j.tenant, j.queue, j.kind,
           width_bucket((julianday(a.started_at) - julianday(a.due_at)) * 86400.0, :bounds)
    FROM (SELECT * FROM jobs WHERE {_RANGE}) AS j
    JOIN job_attempts AS a ON a.job_id = j.id AND a.claim = 1
) AS m
WHERE bucket IS NOT NULL
GROUP BY day, measure, tenant, queue, kind, bucket
ON CONFLICT (day, measure, tenant, queue, kind, bucket) DO UPDATE SET jobs = jobs + excluded.jobs
"""

MOVE_WATERMARK = """
UPDATE rollup_watermark SET finished_at = :last_at, job_id = :last_id WHERE name = 'daily'
"""


def _fold_sqlite(conn: sqlite3.Connection, now: str) -> None:
    """Every settled job past the watermark: the batch's keys, the counts, the histograms, the watermark."""
    mark = conn.execute(MARK).fetchone()
    if mark is None:
        return
    keys = conn.execute(
        BATCH_KEYS,
        {"mark_at": mark[0], "mark_id": mark[1], "now": now, "settle": SETTLE_SECONDS, "limit": -1},
    ).fetchall()
    if not keys:
        return
    params = {
        "mark_at": mark[0],
        "mark_id": mark[1],
        "last_at": keys[-1][0],
        "last_id": keys[-1][1],
        "bounds": json.dumps(BUCKET_BOUNDS),
        "bucket_seconds": json.dumps(BUCKET_SECONDS),
    }
    conn.execute(FOLD_COUNTS, params)
    conn.execute(FOLD_HISTOGRAMS, params)
    conn.execute(MOVE_WATERMARK, params)


def _width_bucket(value: float | None, bounds_json: str) -> int | None:
    """PostgreSQL's width_bucket(value, thresholds), which SQLite lacks: how many thresholds are <= value."""
    if value is None:
        return None
    return bisect.bisect_right(json.loads(bounds_json), value)


def downgrade() -> None:
    for name, (table, *_) in HISTORY_INDEXES.items():
        op.drop_index(name, table_name=table)
    for view in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {view}")
    op.drop_table("rollup_watermark")
    op.drop_table("job_daily_histogram")
    op.drop_table("job_daily_rollup")
