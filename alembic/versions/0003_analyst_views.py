"""Analysts' read model: the views job_history and attempt_history.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29

Analysts query these two views, never the tables: the views are the stable
contract (docs/ANALYSTS.md lists the columns), the tables may change under them.
On PostgreSQL the read-only role of ``deploy/analysts.sql`` may SELECT the views
and nothing else; a view runs with its owner's privileges, so that is enough.

- ``job_history``: one row per job. ``queue_wait_seconds`` is the wait before the
  job's first start ever (its first claim's attempt); ``run_seconds`` is the last
  attempt's run, for jobs that succeeded or failed. ``result`` is the result body.
- ``attempt_history``: one row per attempt, with the job's tenant, queue and kind.
  ``claim`` numbers a job's attempts for good (1 is its first attempt ever; a
  replay or a release resets or gives back ``attempt``, never ``claim``).
  ``pickup_seconds`` is how long the attempt waited after it was due.

Why these shapes, for six weeks of history:
- Every join is a LEFT JOIN on a unique key: the result's primary key, the first
  claim's attempt (unique on job_id, claim), replays grouped by job, and, from
  ``attempt_history``, the job's primary key (the foreign key guarantees it is
  there). PostgreSQL removes such a join from a query that reads none of its
  columns (join removal), so a query pays only for the columns it reads.
- PostgreSQL (14+) also gets statistics on the UTC day of each timestamp that
  analysts group by (``(finished_at AT TIME ZONE 'UTC')::date`` …). Without them
  the planner guesses one group per row for ``GROUP BY day`` and sorts a million
  rows to disk instead of hashing a few hundred groups in parallel. Statistics
  objects are not tables or indexes: ``alembic check`` does not compare them.

The same SELECTs on both stores; only the interval arithmetic differs
(PostgreSQL ``date_part('epoch', a - b)``, SQLite ``julianday``).

Note for later migrations on SQLite: a batch ALTER of ``jobs``, ``job_attempts``,
``job_results`` or ``job_replays`` recreates the table, and SQLite refuses to
rename a table while a view names a table that is missing. Drop these views
first and create them again after (``upgrade()`` below, or their SQL).
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

VIEWS = ("attempt_history", "job_history")

# name: (table, column): statistics on the expression (column AT TIME ZONE 'UTC')::date
DAY_STATISTICS = {
    "st_jobs_created_day": ("jobs", "created_at"),
    "st_jobs_finished_day": ("jobs", "finished_at"),
    "st_job_attempts_started_day": ("job_attempts", "started_at"),
    "st_job_attempts_finished_day": ("job_attempts", "finished_at"),
}


def _seconds(dialect: str, later: str, earlier: str) -> str:
    """SQL for ``later - earlier`` in seconds (a float; NULL if either is NULL)."""
    if dialect == "postgresql":
        # date_part is extract's float8 twin: no numeric arithmetic on a million rows.
        return f"date_part('epoch', {later} - {earlier})"
    return f"(julianday({later}) - julianday({earlier})) * 86400.0"


def job_history_sql(dialect: str) -> str:
    return f"""
CREATE VIEW job_history AS
SELECT j.id AS job_id,
       j.tenant,
       j.queue,
       j.kind,
       j.state,
       j.attempts,
       j.max_attempts,
       j.claims,
       j.priority,
       j.done,
       j.total,
       j.created_at,
       j.started_at,
       j.finished_at,
       {_seconds(dialect, "first_claim.started_at", "j.created_at")} AS queue_wait_seconds,
       CASE WHEN j.state IN ('succeeded', 'failed')
            THEN {_seconds(dialect, "j.finished_at", "j.started_at")} END AS run_seconds,
       j.error,
       j.error_group,
       j.result_id,
       r.body AS result,
       coalesce(p.replays, 0) AS replay_count,
       p.last_replayed_at
FROM jobs AS j
LEFT JOIN job_results AS r ON r.id = j.result_id
LEFT JOIN job_attempts AS first_claim ON first_claim.job_id = j.id AND first_claim.claim = 1
LEFT JOIN (
    SELECT job_id, count(*) AS replays, max(replayed_at) AS last_replayed_at
    FROM job_replays
    GROUP BY job_id
) AS p ON p.job_id = j.id
"""


def attempt_history_sql(dialect: str) -> str:
    return f"""
CREATE VIEW attempt_history AS
SELECT a.id AS attempt_id,
       a.job_id,
       j.tenant,
       j.queue,
       j.kind,
       a.claim,
       a.attempt,
       a.worker,
       a.due_at,
       a.started_at,
       a.finished_at,
       {_seconds(dialect, "a.started_at", "a.due_at")} AS pickup_seconds,
       {_seconds(dialect, "a.finished_at", "a.started_at")} AS run_seconds,
       a.outcome,
       a.error
FROM job_attempts AS a
LEFT JOIN jobs AS j ON j.id = a.job_id
"""


def _has_expression_statistics() -> bool:
    bind = op.get_bind()
    version = bind.dialect.server_version_info or (0,)
    return bind.dialect.name == "postgresql" and version >= (14,)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute(job_history_sql(dialect))
    op.execute(attempt_history_sql(dialect))
    if _has_expression_statistics():
        for name, (table, column) in DAY_STATISTICS.items():
            op.execute(f"CREATE STATISTICS IF NOT EXISTS {name} ON (({column} AT TIME ZONE 'UTC')::date) FROM {table}")
        # Sampled (a few seconds at most on a large history); reads and writes go on meanwhile.
        # Not on a new, empty database: statistics that say "empty" make the planner prefer
        # sequential scans in the generic plans workers prepare early, and keep them as the
        # tables grow until the next ANALYZE (never, where autovacuum is off). Unanalyzed
        # tables are costed as at least ten pages, where the hot path's key lookups win.
        if op.get_bind().exec_driver_sql("SELECT EXISTS (SELECT 1 FROM jobs)").scalar():
            op.execute("ANALYZE jobs, job_attempts")


def downgrade() -> None:
    if _has_expression_statistics():
        for name in DAY_STATISTICS:
            op.execute(f"DROP STATISTICS IF EXISTS {name}")
    for view in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {view}")
