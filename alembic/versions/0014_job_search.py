"""The console's job search (issue 28): indexes for the searches the existing ones cannot bound.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04

Every other filter of the search rides an index that was there (the primary key walked newest
first, ``ix_jobs_tenant_id``); these three would otherwise read the whole history when they
match little or nothing, which is what a search for one key or one error usually does:

- ``ix_jobs_errored_id``: the jobs that show an error (not succeeded, an error written), by id.
  A substring of the error uses no B-tree; the search tries it on these rows only (the failed
  and retrying jobs: a few percent of the history), newest first. Rows enter it when an attempt
  fails, a write that already changes indexed columns; a heartbeat never touches it.
- ``ix_jobs_idempotency_key_id``: one key's jobs across tenants (``uq_jobs_tenant_idempotency_key``
  leads with the tenant, and the console searches every tenant).
- ``ix_jobs_concurrency_key_id``: one concurrency key's jobs in every state (``ix_jobs_running``
  holds the running ones only).

Partial: only jobs with the value enter each, so a job without keys or errors costs nothing.
Built CONCURRENTLY on PostgreSQL (workers and the API go on writing); expand-only, so the
release before runs on this schema.

Frozen: imports only alembic and sqlalchemy.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None
compatible_with_previous = True

SEARCH_INDEXES = {
    "ix_jobs_errored_id": (["id"], "error IS NOT NULL AND state <> 'succeeded'"),
    "ix_jobs_idempotency_key_id": (["idempotency_key", "id"], "idempotency_key IS NOT NULL"),
    "ix_jobs_concurrency_key_id": (["concurrency_key", "id"], "concurrency_key IS NOT NULL"),
}


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    with op.get_context().autocommit_block():
        for name, (columns, where) in SEARCH_INDEXES.items():
            op.create_index(
                name,
                "jobs",
                columns,
                postgresql_where=sa.text(where),
                sqlite_where=sa.text(where),
                postgresql_concurrently=postgres,
            )


def downgrade() -> None:
    for name in SEARCH_INDEXES:
        op.drop_index(name, table_name="jobs")
