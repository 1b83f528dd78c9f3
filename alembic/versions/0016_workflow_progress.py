"""Workflows as a whole (issue 29): a job's workflow, its progress counted through one index,
and the analysts' ``job_history`` showing it.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04

- ``jobs.workflow_id``: the id of the workflow's root job (service.workflows.workflow_ids decides
  it at enqueue). Set on every job with parents or dependents; NULL on an independent job, so a
  plain enqueue writes nothing more and the claim reads nothing more. Jobs enqueued before this
  revision keep NULL: their workflows have no id (a job enqueued later under one of them as a
  parent starts a workflow of its own there).
- ``ix_jobs_workflow_id_id``: one workflow's jobs, by id. Its progress (counts by state) reads
  that slice and no other job; the console's list of a workflow walks it newest first (keyset).
  Partial: only jobs of a workflow enter it. Built CONCURRENTLY on PostgreSQL (workers and the
  API go on writing); the column is NULL everywhere then, so the build reads the table once and
  writes an empty index.
- ``job_history`` gains ``workflow_id`` as its last column (CREATE OR REPLACE VIEW on
  PostgreSQL, which may only append columns: the analysts' role keeps its grant; SQLite has no
  grants and no OR REPLACE, so it drops and creates the view).

Expand-only: the release before writes NULL, which is an independent job's value, and reads
none of it.

Frozen: imports only alembic and sqlalchemy.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None
compatible_with_previous = True

Id = sa.Uuid().with_variant(sa.String(36), "sqlite")

WORKFLOW_INDEX = "ix_jobs_workflow_id_id"
IN_A_WORKFLOW = "workflow_id IS NOT NULL"
WORKFLOW_COLUMN = ",\n       j.workflow_id"
# Whether deploy/analysts.sql's role may read job_history (CASE: no privilege check for a role
# that does not exist, which would be an error).
ANALYSTS_READ_IT = """
SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'jobq_analyst')
            THEN has_table_privilege('jobq_analyst', 'job_history', 'SELECT') ELSE false END
"""


def _seconds(dialect: str, later: str, earlier: str) -> str:
    """SQL for ``later - earlier`` in seconds (as migration 0003 writes it)."""
    if dialect == "postgresql":
        return f"date_part('epoch', {later} - {earlier})"
    return f"(julianday({later}) - julianday({earlier})) * 86400.0"


def _job_history(dialect: str, workflow: bool) -> str:
    """Migration 0003's job_history, with workflow_id appended when ``workflow``."""
    create = "CREATE OR REPLACE VIEW" if dialect == "postgresql" else "CREATE VIEW"
    return f"""
{create} job_history AS
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
       p.last_replayed_at{WORKFLOW_COLUMN if workflow else ""}
FROM jobs AS j
LEFT JOIN job_results AS r ON r.id = j.result_id
LEFT JOIN job_attempts AS first_claim ON first_claim.job_id = j.id AND first_claim.claim = 1
LEFT JOIN (
    SELECT job_id, count(*) AS replays, max(replayed_at) AS last_replayed_at
    FROM job_replays
    GROUP BY job_id
) AS p ON p.job_id = j.id
"""


def _replace_job_history(dialect: str, workflow: bool) -> None:
    if dialect == "postgresql" and workflow:
        op.execute(_job_history(dialect, workflow))  # appends a column: the grants stay
        return
    # PostgreSQL cannot drop a view's column in place; the role's grant is given again after it.
    granted = dialect == "postgresql" and bool(op.get_bind().exec_driver_sql(ANALYSTS_READ_IT).scalar())
    op.execute("DROP VIEW IF EXISTS job_history")
    op.execute(_job_history(dialect, workflow).replace("CREATE OR REPLACE VIEW", "CREATE VIEW"))
    if granted:
        op.execute("GRANT SELECT ON TABLE job_history TO jobq_analyst")


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.add_column("jobs", sa.Column("workflow_id", Id, nullable=True))
    _replace_job_history(dialect, workflow=True)
    with op.get_context().autocommit_block():
        op.create_index(
            WORKFLOW_INDEX,
            "jobs",
            ["workflow_id", "id"],
            postgresql_where=sa.text(IN_A_WORKFLOW),
            sqlite_where=sa.text(IN_A_WORKFLOW),
            postgresql_concurrently=dialect == "postgresql",
        )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.drop_index(WORKFLOW_INDEX, table_name="jobs")
    _replace_job_history(dialect, workflow=False)
    op.drop_column("jobs", "workflow_id")  # SQLite 3.35+ drops a column in place
