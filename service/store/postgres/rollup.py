"""The daily rollup's fold on PostgreSQL (see service.maintenance.rollup): one statement.

Kept apart from the hot path's statements: the fold runs in workers' maintenance, never
on a claim or a finish, and the migration that creates the rollup backfills it with
this same statement (``limit`` NULL: every job finished so far).
"""

from __future__ import annotations

from service.store.sqlfiles import statements

_SQL = statements("postgres")

FOLD_ROLLUP = _SQL["fold_rollup"]
