"""Per-item outcomes: the table job_items, the counts on jobs, the view job_item_history.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

- ``job_items``: one row per item of a job that recorded an outcome (ok with a
  result, or failed with an error), keyed by (job_id, item_index): the key is
  "the items of a job in order"; partial indexes hold "the failed items of a
  job" and the failed items by time (the analysts' window of failures). Rows go
  with their job (ON DELETE CASCADE), so pruning needs no change.
- ``jobs.items_ok`` / ``jobs.items_failed``: the counts a status poll shows,
  written by the same statement that writes the items. Not indexed, so a
  heartbeat stays a HOT update. Adding a column with a constant default rewrites
  nothing on PostgreSQL (11+) or SQLite.
- ``job_item_history``: the analysts' view of the items, with the job's tenant,
  queue and kind (granted to jobq_analyst by deploy/analysts.sql).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Id = sa.Uuid().with_variant(sa.String(36), "sqlite")
Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql").with_variant(sa.Text(), "sqlite")
Timestamp = sa.DateTime(timezone=True).with_variant(sa.String(23), "sqlite")

JOB_ITEM_HISTORY = """
CREATE VIEW job_item_history AS
SELECT i.job_id,
       j.tenant,
       j.queue,
       j.kind,
       i.item_index,
       i.state,
       i.result,
       i.error,
       i.error_group,
       i.attempt,
       i.finished_at
FROM job_items AS i
LEFT JOIN jobs AS j ON j.id = i.job_id
"""


def upgrade() -> None:
    op.add_column("jobs", sa.Column("items_ok", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("jobs", sa.Column("items_failed", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "job_items",
        sa.Column("job_id", Id, nullable=False),
        sa.Column("item_index", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("result", Json, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("error_group", sa.Text(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("finished_at", Timestamp, nullable=False),
        sa.CheckConstraint("state IN ('ok','failed')", name=op.f("ck_job_items_state")),
        sa.CheckConstraint(
            "state <> 'failed' OR (error IS NOT NULL AND error <> '')", name=op.f("ck_job_items_failed_has_error")
        ),
        sa.CheckConstraint("item_index >= 0", name=op.f("ck_job_items_index_non_negative")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_job_items_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "item_index", name=op.f("pk_job_items")),
    )
    op.create_index(
        "ix_job_items_failed",
        "job_items",
        ["job_id", "item_index"],
        postgresql_where=sa.text("state = 'failed'"),
        sqlite_where=sa.text("state = 'failed'"),
    )
    op.create_index(
        "ix_job_items_failed_finished_at",
        "job_items",
        ["finished_at"],
        postgresql_where=sa.text("state = 'failed'"),
        sqlite_where=sa.text("state = 'failed'"),
    )
    op.execute(JOB_ITEM_HISTORY)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS job_item_history")
    op.drop_index("ix_job_items_failed_finished_at", table_name="job_items")
    op.drop_index("ix_job_items_failed", table_name="job_items")
    op.drop_table("job_items")
    # Native DROP COLUMN on both (SQLite 3.35+): no table rebuild, so the views over jobs stay.
    op.drop_column("jobs", "items_failed")
    op.drop_column("jobs", "items_ok")
