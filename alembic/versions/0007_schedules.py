"""Periodic jobs: the schedules table; per-kind max_attempts: jobs.max_attempts_default.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

One row per schedule (``jobq schedule add``, or ``@app.periodic`` written by the
workers at start): the cron expression and time zone, the job each tick enqueues,
and ``next_run_at``, which every worker's scheduler reads through ``ix_schedules_due``
and advances with a compare-and-set. See service/schedules.py.

``jobs.max_attempts_default``: true when the enqueue named no max_attempts; the claim then
writes the kind's (its handler's max_attempts) into ``max_attempts``. Existing jobs named
theirs (the old default, 3), so false. A column added with a constant default: no table
rewrite on either database.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

Id = sa.Uuid(as_uuid=True).with_variant(sa.String(36), "sqlite")
Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql").with_variant(sa.Text(), "sqlite")
Timestamp = sa.DateTime(timezone=True).with_variant(sa.String(23), "sqlite")
NOT_PAUSED = sa.text("NOT paused")


def upgrade() -> None:
    op.add_column("jobs", sa.Column("max_attempts_default", sa.Boolean(), server_default=sa.false(), nullable=False))
    op.create_table(
        "schedules",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("cron", sa.Text(), nullable=False),
        sa.Column("timezone", sa.Text(), server_default="UTC", nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("payload", Json, nullable=False),
        sa.Column("queue", sa.Text(), server_default="default", nullable=False),
        sa.Column("tenant", sa.Text(), server_default="default", nullable=False),
        sa.Column("catch_up", sa.Text(), server_default="one", nullable=False),
        sa.Column("source", sa.Text(), server_default="cli", nullable=False),
        sa.Column("paused", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("next_run_at", Timestamp, nullable=False),
        sa.Column("last_run_at", Timestamp, nullable=True),
        sa.Column("last_job_id", Id, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.CheckConstraint("catch_up IN ('one','skip')", name=op.f("ck_schedules_catch_up")),
        sa.CheckConstraint("source IN ('code','cli')", name=op.f("ck_schedules_source")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_schedules")),
    )
    op.create_index(
        "ix_schedules_due", "schedules", ["next_run_at"], postgresql_where=NOT_PAUSED, sqlite_where=NOT_PAUSED
    )


def downgrade() -> None:
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.drop_table("schedules")
    op.drop_column("jobs", "max_attempts_default")  # SQLite 3.35+ drops a column in place
