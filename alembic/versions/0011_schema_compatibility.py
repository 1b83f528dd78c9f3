"""Rollbacks: the schema says which releases it still serves (schema_compatibility).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03

A release rolled back after its migration ran meets a schema newer than any revision it knows.
It cannot read the newer revisions' files (they ship with the newer release), so the schema
itself says which releases may run on it: after every upgrade or downgrade (alembic/env.py,
service.store.migrate.record_compatibility) this table holds the newest revision of each
release the schema serves: the current revision, then down the chain for as long as each newer
revision declares ``compatible_with_previous = True`` (expand-only: new tables, new nullable or
defaulted columns, new indexes and functions; the previous release's statements stay valid).

A release whose newest revision is in this table runs on the schema ("ahead, compatible"); any
other release whose revisions are all older is "behind"; a release that knows no row is "ahead".
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# A new table, read only by releases from this one on: release 0010's statements stay valid.
compatible_with_previous = True


def upgrade() -> None:
    op.create_table(
        "schema_compatibility",
        sa.Column("revision", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("revision", name=op.f("pk_schema_compatibility")),
    )


def downgrade() -> None:
    op.drop_table("schema_compatibility")
