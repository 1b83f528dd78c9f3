"""Console sessions (one row per operator's login), the console's audit trail, read-only operators.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03

The console's cookie held the admin token itself: logout could not end a copied session, and
whoever read the cookie held a permanent admin credential. A login now makes a random session
id; the cookie holds it, the table holds only its SHA-256 (a copy of the table opens nothing),
the token it came from (a revoked token ends its sessions: every request joins it), when it was
last used (the idle timeout) and when it ends whatever happens (``expires_at``). Logout deletes
the row. Deleting a token deletes its sessions (ON DELETE CASCADE).

``console_audit``: every change made from the console (cancel, replay, bulk actions, pauses,
a schedule's run now): who (the token's name), when (the database clock), what, on what, how
many jobs it touched. Read newest first (the primary key) and by target (a job's page).

``api_tokens.read_only``: an operator's token that may look at the console but change nothing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# New tables and a column with a default: release 0011's statements stay valid.
compatible_with_previous = True

Id = sa.Uuid(as_uuid=True).with_variant(sa.String(36), "sqlite")
Timestamp = sa.DateTime(timezone=True).with_variant(sa.String(23), "sqlite")


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id_hash", sa.Text(), nullable=False),
        sa.Column("token_id", Id, nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("last_seen_at", Timestamp, nullable=False),
        sa.Column("expires_at", Timestamp, nullable=False),
        sa.ForeignKeyConstraint(
            ["token_id"], ["api_tokens.id"], name=op.f("fk_console_sessions_token_id_api_tokens"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_console_sessions")),
    )
    op.create_index("ix_console_sessions_token_id", "console_sessions", ["token_id"])
    op.create_index("ix_console_sessions_expires_at", "console_sessions", ["expires_at"])
    op.create_table(
        "console_audit",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), autoincrement=True, nullable=False),
        sa.Column("at", Timestamp, nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_console_audit")),
    )
    op.create_index("ix_console_audit_target", "console_audit", ["target", "id"])
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("read_only", sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("read_only")
    op.drop_index("ix_console_audit_target", table_name="console_audit")
    op.drop_table("console_audit")
    op.drop_index("ix_console_sessions_expires_at", table_name="console_sessions")
    op.drop_index("ix_console_sessions_token_id", table_name="console_sessions")
    op.drop_table("console_sessions")
