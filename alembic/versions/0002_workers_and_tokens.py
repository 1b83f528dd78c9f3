"""Workers (who is alive) and API tokens (hashed, per tenant).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

Id = sa.Uuid().with_variant(sa.String(36), "sqlite")
Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql").with_variant(sa.Text(), "sqlite")
Timestamp = sa.DateTime(timezone=True).with_variant(sa.String(23), "sqlite")


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", Json, nullable=False),
        sa.Column("kinds", Json, nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("started_at", Timestamp, nullable=False),
        sa.Column("last_seen_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
    )
    op.create_index("ix_workers_last_seen_at", "workers", ["last_seen_at"])

    op.create_table(
        "api_tokens",
        sa.Column("id", Id, nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=True),
        # SHA-256 of the token; the token itself is shown once and never stored.
        sa.Column("token_hash", sa.Text(), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("revoked_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )


def downgrade() -> None:
    op.drop_table("api_tokens")
    op.drop_index("ix_workers_last_seen_at", table_name="workers")
    op.drop_table("workers")
