"""Leadership: the leaders table, one row per leadership (today one: "maintenance").

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

Maintenance (the reaper, the scheduler, the rollup's fold, retention) runs on one worker of
the fleet at a time: the holder of the leadership's lease. The lease is a row with an
expiry, taken and renewed by one statement like a job's lease (so it works through a
transaction pooler, where a session advisory lock would not), and ``term`` counts the
takeovers: every maintenance write is checked against (owner, term, unexpired) in its own
transaction, so a deposed leader's writes change nothing. The row stays when its holder
resigns (``expires_at`` set to now): the term only ever grows.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# A new table only: release 0008's statements stay valid on this schema (rollbacks, 0011).
compatible_with_previous = True

Timestamp = sa.DateTime(timezone=True).with_variant(sa.String(23), "sqlite")


def upgrade() -> None:
    op.create_table(
        "leaders",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("term", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", Timestamp, nullable=False),
        sa.Column("renewed_at", Timestamp, nullable=False),
        sa.Column("expires_at", Timestamp, nullable=False),
        sa.CheckConstraint("term >= 1", name=op.f("ck_leaders_term_positive")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leaders")),
    )


def downgrade() -> None:
    op.drop_table("leaders")
