"""Fleet-wide limits and fair sharing: the limits and scope_counters tables; the claim's
indexes gain the tenant.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02

- ``limits``: what operators set per scope (concurrency, rate, weight).
- ``scope_counters``: per limited scope, the jobs of it running now and the rate
  window's starts; the claim locks these rows (see CLAIM_JOBS).
- ``ix_jobs_claimable`` becomes (queue, tenant, priority DESC, run_after, id): the
  fair claim walks the tenants with due jobs one index probe each and takes each
  tenant's next jobs in priority order from the same index.
- ``ix_jobs_running`` becomes (tenant, concurrency_key): the fair claim counts a
  tenant's running jobs; still only running rows, and no column a heartbeat writes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.String(23), "sqlite")
QUEUED = sa.text("state = 'queued'")
RUNNING = sa.text("state = 'running'")


def upgrade() -> None:
    op.create_table(
        "limits",
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("rate", sa.Integer(), nullable=True),
        sa.Column("per_seconds", sa.Float(), nullable=True),
        sa.Column("weight", sa.Float(), nullable=True),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.CheckConstraint("concurrency IS NULL OR concurrency >= 0", name=op.f("ck_limits_concurrency")),
        sa.CheckConstraint(
            "(rate IS NULL) = (per_seconds IS NULL) AND (rate IS NULL OR (rate >= 1 AND per_seconds > 0))",
            name=op.f("ck_limits_rate"),
        ),
        sa.CheckConstraint("weight IS NULL OR weight > 0", name=op.f("ck_limits_weight")),
        sa.PrimaryKeyConstraint("scope", name=op.f("pk_limits")),
    )
    op.create_table(
        "scope_counters",
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("running", sa.Integer(), server_default="0", nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("rate", sa.Integer(), nullable=True),
        sa.Column("per_seconds", sa.Float(), nullable=True),
        sa.Column("window_start", Timestamp, nullable=True),
        sa.Column("window_starts", sa.Integer(), server_default="0", nullable=False),
        sa.CheckConstraint("running >= 0", name=op.f("ck_scope_counters_running_non_negative")),
        sa.PrimaryKeyConstraint("scope", name=op.f("pk_scope_counters")),
    )
    op.drop_index("ix_jobs_claimable", table_name="jobs")
    op.create_index(
        "ix_jobs_claimable",
        "jobs",
        ["queue", "tenant", sa.text("priority DESC"), "run_after", "id"],
        postgresql_where=QUEUED,
        sqlite_where=QUEUED,
    )
    op.drop_index("ix_jobs_running", table_name="jobs")
    op.create_index(
        "ix_jobs_running", "jobs", ["tenant", "concurrency_key"], postgresql_where=RUNNING, sqlite_where=RUNNING
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_running", table_name="jobs")
    op.create_index("ix_jobs_running", "jobs", ["concurrency_key"], postgresql_where=RUNNING, sqlite_where=RUNNING)
    op.drop_index("ix_jobs_claimable", table_name="jobs")
    op.create_index(
        "ix_jobs_claimable",
        "jobs",
        ["queue", sa.text("priority DESC"), "run_after", "id"],
        postgresql_where=QUEUED,
        sqlite_where=QUEUED,
    )
    op.drop_table("scope_counters")
    op.drop_table("limits")
