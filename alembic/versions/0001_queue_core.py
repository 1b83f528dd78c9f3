"""Queue core: jobs, job_results, job_attempts, job_replays.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Id = sa.Uuid().with_variant(sa.String(36), "sqlite")
Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql").with_variant(sa.Text(), "sqlite")
Timestamp = sa.DateTime(timezone=True).with_variant(sa.String(23), "sqlite")
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

QUEUED = sa.text("state = 'queued'")
RUNNING = sa.text("state = 'running'")
HAS_IDEMPOTENCY_KEY = sa.text("idempotency_key IS NOT NULL")


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", Id, nullable=False),
        sa.Column("tenant", sa.Text(), server_default="default", nullable=False),
        sa.Column("queue", sa.Text(), server_default="default", nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("payload", Json, nullable=False),
        sa.Column("state", sa.Text(), server_default="queued", nullable=False),
        sa.Column("priority", sa.Integer(), server_default="0", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_attempts", sa.Integer(), server_default="3", nullable=False),
        sa.Column("claims", sa.Integer(), server_default="0", nullable=False),
        sa.Column("done", sa.Integer(), server_default="0", nullable=False),
        sa.Column("total", sa.Integer(), nullable=True),
        sa.Column("checkpoint", Json, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("error_group", sa.Text(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("lease_owner", sa.Text(), nullable=True),
        sa.Column("lease_expires_at", Timestamp, nullable=True),
        sa.Column("run_after", Timestamp, nullable=False),
        sa.Column("concurrency_key", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.Text(), nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("started_at", Timestamp, nullable=True),
        sa.Column("finished_at", Timestamp, nullable=True),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.Column("result_id", Id, nullable=True),
        sa.CheckConstraint(
            "state IN ('queued','running','succeeded','failed','cancelled')", name=op.f("ck_jobs_state")
        ),
        sa.CheckConstraint(
            "state <> 'failed' OR (error IS NOT NULL AND error <> '')", name=op.f("ck_jobs_failed_has_error")
        ),
        sa.CheckConstraint(
            "state <> 'running' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)",
            name=op.f("ck_jobs_running_has_lease"),
        ),
        sa.CheckConstraint("total IS NULL OR total <= 0 OR done <= total", name=op.f("ck_jobs_done_within_total")),
        sa.CheckConstraint("done >= 0 AND (total IS NULL OR total >= 0)", name=op.f("ck_jobs_progress_non_negative")),
        sa.CheckConstraint("priority >= 0", name=op.f("ck_jobs_priority_non_negative")),
        sa.CheckConstraint(
            "attempts >= 0 AND max_attempts >= 1 AND attempts <= max_attempts", name=op.f("ck_jobs_attempts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index(
        "ix_jobs_claimable",
        "jobs",
        ["queue", sa.text("priority DESC"), "run_after", "id"],
        postgresql_where=QUEUED,
        sqlite_where=QUEUED,
    )
    op.create_index("ix_jobs_running", "jobs", ["concurrency_key"], postgresql_where=RUNNING, sqlite_where=RUNNING)
    op.create_index("ix_jobs_tenant_id", "jobs", ["tenant", sa.text("id DESC")])
    op.create_index(
        "uq_jobs_tenant_idempotency_key",
        "jobs",
        ["tenant", "idempotency_key"],
        unique=True,
        postgresql_where=HAS_IDEMPOTENCY_KEY,
        sqlite_where=HAS_IDEMPOTENCY_KEY,
    )
    op.create_index("ix_jobs_finished_at", "jobs", ["finished_at"])
    if op.get_bind().dialect.name == "postgresql":
        # Room on each page for a heartbeat's new row version (HOT), and vacuum a
        # queue table long before the default 20% of it is dead tuples.
        op.execute(
            "ALTER TABLE jobs SET (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01,"
            " autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02)"
        )

    op.create_table(
        "job_results",
        sa.Column("id", Id, nullable=False),
        sa.Column("job_id", Id, nullable=False),
        sa.Column("body", Json, nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_job_results_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_results")),
    )
    op.create_index("ix_job_results_job_id", "job_results", ["job_id"])

    op.create_table(
        "job_attempts",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("job_id", Id, nullable=False),
        sa.Column("claim", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker", sa.Text(), nullable=False),
        sa.Column("due_at", Timestamp, nullable=False),
        sa.Column("started_at", Timestamp, nullable=False),
        sa.Column("finished_at", Timestamp, nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "outcome IS NULL OR outcome IN ('succeeded','failed','lease_expired','released','cancelled')",
            name=op.f("ck_job_attempts_outcome"),
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_job_attempts_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_attempts")),
    )
    op.create_index("uq_job_attempts_job_id_claim", "job_attempts", ["job_id", "claim"], unique=True)
    op.create_index("ix_job_attempts_finished_at", "job_attempts", ["finished_at"])

    op.create_table(
        "job_replays",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("job_id", Id, nullable=False),
        sa.Column("replayed_at", Timestamp, nullable=False),
        sa.Column("replayed_by", sa.Text(), nullable=False),
        sa.Column("previous_state", sa.Text(), nullable=False),
        sa.Column("previous_error", sa.Text(), nullable=True),
        sa.Column("previous_attempts", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_job_replays_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_replays")),
    )
    op.create_index("ix_job_replays_job_id", "job_replays", ["job_id"])


def downgrade() -> None:
    op.drop_table("job_replays")
    op.drop_table("job_attempts")
    op.drop_table("job_results")
    op.drop_table("jobs")
