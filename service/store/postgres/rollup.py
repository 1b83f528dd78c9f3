"""The daily rollup's fold on PostgreSQL (see service.maintenance.rollup): one statement.

Kept apart from the hot path's statements: the fold runs in workers' maintenance, never
on a claim or a finish. Migration 0008 backfills the rollup with a frozen copy of this
statement (``limit`` NULL: every job finished so far): a change here does not reach it.
"""

from __future__ import annotations

from service.store.sqlfiles import statements

_SQL = statements("postgres")

FOLD_ROLLUP = _SQL["fold_rollup"]
