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
from service.store.sqlite.connection import READ, Connected

# -- acquire_leadership --
# One holder at a time: taken only when its lease ended (expired or resigned), with term + 1;
# renewed, term kept, only by its owner while its lease lasts. One statement under the write
# lock; a candidate that finds the lease held gets no row back and reads the holder's
# (HELD_LEADERSHIP) in the same transaction. The store's clock only.
ACQUIRE_LEADERSHIP = """
INSERT INTO leaders AS l (name, owner, term, acquired_at, renewed_at, expires_at)
VALUES (:name, :owner, 1, :now, :now, strftime('%Y-%m-%d %H:%M:%f', :now, :lease_seconds || ' seconds'))
ON CONFLICT (name) DO UPDATE SET
    owner = excluded.owner,
    term = CASE WHEN l.expires_at > excluded.renewed_at THEN l.term ELSE l.term + 1 END,
    acquired_at = CASE WHEN l.expires_at > excluded.renewed_at THEN l.acquired_at ELSE excluded.acquired_at END,
    renewed_at = excluded.renewed_at,
    expires_at = excluded.expires_at
WHERE l.expires_at <= excluded.renewed_at OR l.owner = excluded.owner
RETURNING name, owner, term, acquired_at, expires_at, 1 AS mine, 0.0 AS free_in
"""

# -- held_leadership --
# The lease another holds, and free_in: seconds until it ends, so a candidate comes back then.
HELD_LEADERSHIP = """
SELECT name, owner, term, acquired_at, expires_at, 0 AS mine,
       (julianday(expires_at) - julianday(:now)) * 86400.0 AS free_in
FROM leaders
WHERE name = :name
"""

# -- resign_leadership --
# A graceful shutdown ends its own term's lease now; the row and its term stay (terms only grow).
RESIGN_LEADERSHIP = """
UPDATE leaders
SET expires_at = :now, renewed_at = :now
WHERE name = :leader_name AND owner = :leader_owner AND term = :leader_term AND expires_at > :now
RETURNING name
"""

# -- current_leader --
# Who leads now, for the console, stats and /metrics: an unexpired lease only.
CURRENT_LEADER = """
SELECT name, owner, term, acquired_at, expires_at
FROM leaders
WHERE name = :name AND expires_at > :now
"""

# -- check_leader --
# The fence of a leader's write, in the write's transaction: the token must still hold an
# unexpired lease. No row: LeadershipLost, and the write's transaction rolls back.
CHECK_LEADER = """
SELECT term
FROM leaders
WHERE name = :leader_name AND owner = :leader_owner AND term = :leader_term AND expires_at > :now
"""


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
