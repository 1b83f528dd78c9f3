"""Leadership on SQLite (service.maintenance.leadership): the same statements and operations as
on PostgreSQL (service/store/postgres/leadership.py says why a row and a term), and the fence a
leader's write runs behind. Every write here holds the file's write lock (BEGIN IMMEDIATE), so
the fence is a read in the write's own transaction: no takeover can commit between the check
and the write.
"""

from __future__ import annotations

import sqlite3

from service.store import checks
from service.store.base import MAINTENANCE, LeaderLease
from service.store.sqlfiles import statements
from service.store.sqlite.connection import READ, Connected

_SQL = statements("sqlite")

ACQUIRE_LEADERSHIP = _SQL["acquire_leadership"]

HELD_LEADERSHIP = _SQL["held_leadership"]

RESIGN_LEADERSHIP = _SQL["resign_leadership"]

CURRENT_LEADER = _SQL["current_leader"]

CHECK_LEADER = _SQL["check_leader"]


def check_leader(conn: sqlite3.Connection, now: str, leader: LeaderLease | None) -> None:
    """Inside a write transaction: raise LeadershipLost unless ``leader`` (when given) still holds."""
    if leader is not None:
        checks.require_leader(
            conn.execute(CHECK_LEADER, {**checks.leader_token(leader), "now": now}).fetchone(), leader
        )


class Leadership(Connected):
    """acquire_leadership, resign_leadership, current_leader."""

    def acquire_leadership(self, name: str, owner: str, lease_seconds: float) -> tuple[LeaderLease | None, float]:
        params = checks.leadership_args(name, owner, lease_seconds)
        with self._write() as (conn, now):
            row = conn.execute(ACQUIRE_LEADERSHIP, {**params, "now": now}).fetchone()
            if row is None:
                row = conn.execute(HELD_LEADERSHIP, {**params, "now": now}).fetchone()
        return checks.leadership_answer(row, READ.time)

    def resign_leadership(self, lease: LeaderLease) -> bool:
        with self._write() as (conn, now):
            return conn.execute(RESIGN_LEADERSHIP, {**checks.leader_token(lease), "now": now}).fetchone() is not None

    def current_leader(self, name: str = MAINTENANCE) -> LeaderLease | None:
        with self._read() as (conn, now):
            row = conn.execute(CURRENT_LEADER, {"name": name, "now": now}).fetchone()
        return checks.leader_lease(row, READ.time)
