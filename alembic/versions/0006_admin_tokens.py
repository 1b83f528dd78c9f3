"""Admin tokens: operators' tokens for the console (``jobq token create --admin``).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

An admin token opens the operator console (every tenant's jobs) and is refused
by ``/v1``; a tenant's token is refused by the console. Hashed like the others.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch_alter_table: SQLite cannot drop a column in place on downgrade; PostgreSQL alters directly.
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("admin", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("admin")
