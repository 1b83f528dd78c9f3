"""Workflows (issue 29): on PostgreSQL, a job waiting for parents is marked by its run_after.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04

Migration 0013 left jobs waiting for parents out of ``ix_jobs_claimable`` by its predicate
``parents_pending = 0`` (and into ``ix_jobs_held`` by ``parents_pending > 0``). That put the
counter in two indexes, so every parent's completion rewrote its child's index entries, in all
of the table's indexes, even when the child still waited for other parents: an update that is
never HOT, once per edge. A fan-in of 10,000 parents wrote its one child's entries 10,000
times; the layered bench, 28,500 edges for 10,000 jobs.

A waiting job's run_after already says it: it is ``HELD_UNTIL`` (9999-12-31 UTC) until its last
parent frees it, and never otherwise for a queued job (service.workflows). The two predicates
become ``run_after < HELD_UNTIL`` and ``run_after >= HELD_UNTIL``. run_after is in the claim
index's key already, and a completion that leaves its child waiting changes neither run_after
nor any other indexed column of the child: a HOT update (docs/PERFORMANCE.md, "workflows").

PostgreSQL only, built CONCURRENTLY (workers and the API go on writing) beside the old indexes,
which are then dropped, and renamed over them. SQLite keeps its predicates: it has no HOT
update, and its statements name parents_pending.

Not marked compatible with the previous release: that release's claim says ``parents_pending =
0``, from which PostgreSQL cannot prove the new predicate, so it would claim without the
index. A rollback past this revision runs its downgrade first (deploy/README.md, Rollback).

Frozen: imports only alembic and sqlalchemy.
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

HELD_UNTIL = "'9999-12-31 00:00:00+00'::timestamptz"

CLAIMABLE_COLUMNS = "(queue, tenant, priority DESC, run_after, id)"
HELD_COLUMNS = "(queue, kind)"


def _rebuild(predicates: dict[str, str]) -> None:
    """Each index built anew under a temporary name with its new predicate, then swapped in."""
    columns = {"ix_jobs_claimable": CLAIMABLE_COLUMNS, "ix_jobs_held": HELD_COLUMNS}
    with op.get_context().autocommit_block():
        for name, where in predicates.items():
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}_new")  # a rebuild interrupted before
            op.execute(f"CREATE INDEX CONCURRENTLY {name}_new ON jobs {columns[name]} WHERE {where}")
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            op.execute(f"ALTER INDEX {name}_new RENAME TO {name}")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # Every waiting job already carries HELD_UNTIL (0013's statements wrote it); a row that
    # does not would be lost to both indexes, so this makes sure first (few rows: the held index).
    op.execute(
        f"UPDATE jobs SET run_after = {HELD_UNTIL}"
        f" WHERE state = 'queued' AND parents_pending > 0 AND run_after <> {HELD_UNTIL}"
    )
    _rebuild(
        {
            "ix_jobs_claimable": f"state = 'queued' AND run_after < {HELD_UNTIL}",
            "ix_jobs_held": f"state = 'queued' AND run_after >= {HELD_UNTIL}",
        }
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _rebuild(
        {
            "ix_jobs_claimable": "state = 'queued' AND parents_pending = 0",
            "ix_jobs_held": "state = 'queued' AND parents_pending > 0",
        }
    )
