"""The daily rollup and the analysts' day-level views: daily_jobs, daily_histogram, daily_queue_wait, daily_run_time.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

Six weeks at 100,000 jobs a day is 4.2 million job rows; a question per day over six
weeks read all of them (1.1–1.3 s each at that size). The rollup keeps one row per UTC
day × tenant × queue × kind with the counts by outcome, and run-time and wait
histograms (log-spaced buckets; service.maintenance.rollup says which), folded by the
workers' maintenance from a watermark. Six weeks of it is a few thousand rows.

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
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from service.maintenance.rollup import BUCKET_BOUNDS, BUCKET_SECONDS, SETTLE_SECONDS

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

Id = sa.Uuid().with_variant(sa.String(36), "sqlite")
Timestamp = sa.DateTime(timezone=True).with_variant(sa.String(23), "sqlite")
Day = sa.Date().with_variant(sa.String(10), "sqlite")

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
    """Fold every settled finished job with the store's own fold (no limit: one pass)."""
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        from service.store.postgres.rollup import FOLD_ROLLUP

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
        from service.store.sqlite import rollup
        from service.store.sqlite.store import register_functions

        raw = bind.connection.driver_connection
        register_functions(raw)
        [(now,)] = raw.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')").fetchall()
        rollup.fold(raw, now, BUCKET_BOUNDS, BUCKET_SECONDS, SETTLE_SECONDS, None)


def downgrade() -> None:
    for name, (table, *_) in HISTORY_INDEXES.items():
        op.drop_index(name, table_name=table)
    for view in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {view}")
    op.drop_table("rollup_watermark")
    op.drop_table("job_daily_histogram")
    op.drop_table("job_daily_rollup")
