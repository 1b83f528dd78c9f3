"""Leadership on PostgreSQL (service.maintenance.leadership): the leaders table's statements,
the store's operations on it, and the fence every maintenance write of a leader runs behind.

The lease is a row, taken and renewed by one autocommit statement, so it works through a
transaction pooler (a session advisory lock would be held by whichever client the pooler
last gave the server connection to). A leader's write runs in a transaction that first
locks the leader row ``FOR SHARE`` and requires (owner, term, unexpired): a takeover's
upsert needs the row's lock, so it waits for that transaction to end and only then finds
the lease free; the deposed leader's next check finds another term and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from service.store import checks
from service.store.base import MAINTENANCE, LeaderLease
from service.store.postgres.connection import READ, Connected

T = TypeVar("T")

_NOW = "coalesce(%(now)s::timestamptz, now())"

# -- acquire_leadership --
# One holder at a time. The row is taken only when its lease ended (expired or resigned),
# and then with term + 1: the fencing number every leader write is checked against. It is
# renewed (term kept) only by its owner while its lease lasts; an owner whose own lease
# ran out takes it again like anyone, with a new term, since its old term's writes were
# already refused. One statement. The UPDATE locks the row only when it will take or renew
# it (a candidate that finds the lease held reads it and locks nothing, so a fleet of
# candidates never queues on the row or waits on a leader's fence); racing takers queue on
# the row and each re-reads it before deciding, so one takes a free lease. The first
# insert races on the key (DO NOTHING: the loser reads nothing and tries again).
# Answered with the row and, when another holds it, free_in: seconds until its lease ends,
# so a candidate comes back then instead of polling. Database clock only.
ACQUIRE_LEADERSHIP = f"""
WITH n AS (
    SELECT {_NOW} AS ts
),
taken AS (
    UPDATE leaders AS l
    SET owner = %(owner)s,
        term = CASE WHEN l.expires_at > n.ts THEN l.term ELSE l.term + 1 END,
        acquired_at = CASE WHEN l.expires_at > n.ts THEN l.acquired_at ELSE n.ts END,
        renewed_at = n.ts,
        expires_at = n.ts + make_interval(secs => %(lease_seconds)s)
    FROM n
    WHERE l.name = %(name)s AND (l.expires_at <= n.ts OR l.owner = %(owner)s)
    RETURNING l.name, l.owner, l.term, l.acquired_at, l.expires_at
),
founded AS (
    INSERT INTO leaders (name, owner, term, acquired_at, renewed_at, expires_at)
    SELECT %(name)s, %(owner)s, 1, n.ts, n.ts, n.ts + make_interval(secs => %(lease_seconds)s)
    FROM n
    WHERE NOT EXISTS (SELECT FROM leaders WHERE name = %(name)s)
    ON CONFLICT (name) DO NOTHING
    RETURNING name, owner, term, acquired_at, expires_at
),
mine AS (
    SELECT * FROM taken UNION ALL SELECT * FROM founded
)
SELECT name, owner, term, acquired_at, expires_at, true AS mine, 0.0::float8 AS free_in
FROM mine
UNION ALL
SELECT l.name, l.owner, l.term, l.acquired_at, l.expires_at, false, date_part('epoch', l.expires_at - n.ts)::float8
FROM leaders AS l, n
WHERE l.name = %(name)s AND NOT EXISTS (SELECT FROM mine)
"""

# -- resign_leadership --
# A graceful shutdown ends its own term's lease now (the same token as the fence), so a
# successor takes over at once instead of after the lease. The row and its term stay:
# terms only grow, so an old token can never match again.
RESIGN_LEADERSHIP = f"""
UPDATE leaders
SET expires_at = {_NOW}, renewed_at = {_NOW}
WHERE name = %(leader_name)s AND owner = %(leader_owner)s AND term = %(leader_term)s AND expires_at > {_NOW}
RETURNING name
"""

# -- current_leader --
# Who leads now, for the console, stats and /metrics: an unexpired lease only.
CURRENT_LEADER = f"""
SELECT name, owner, term, acquired_at, expires_at
FROM leaders
WHERE name = %(name)s AND expires_at > {_NOW}
"""

# -- check_leader --
# The fence of a leader's write, first in the write's transaction: the token must still hold
# an unexpired lease, and FOR SHARE keeps it so until the transaction ends (a takeover's
# upsert waits for the lock, then finds its term already over). No row: LeadershipLost.
CHECK_LEADER = f"""
SELECT term
FROM leaders
WHERE name = %(leader_name)s AND owner = %(leader_owner)s AND term = %(leader_term)s AND expires_at > {_NOW}
FOR SHARE
"""


class Fenced(Connected):
    """The maintenance areas' base: their writes run behind a leader's token when given one."""

    def _fenced(self, leader: LeaderLease | None, write: Callable[[psycopg.Connection[dict[str, Any]]], T]) -> T:
        """``write`` on a pooled connection; with a token, in one transaction after CHECK_LEADER
        (LeadershipLost and nothing written when the token no longer holds)."""

        def run() -> T:
            with self._connection() as conn:
                if leader is None:
                    return write(conn)
                with conn.transaction():
                    held = conn.execute(CHECK_LEADER, self._params(**checks.leader_token(leader))).fetchone()
                    checks.require_leader(held, leader)
                    return write(conn)

        return self._retrying(run)


class Leadership(Connected):
    """acquire_leadership, resign_leadership, current_leader."""

    def acquire_leadership(self, name: str, owner: str, lease_seconds: float) -> tuple[LeaderLease | None, float]:
        params = self._params(**checks.leadership_args(name, owner, lease_seconds))
        return checks.leadership_answer(self._fetchone(ACQUIRE_LEADERSHIP, params), READ.time)

    def resign_leadership(self, lease: LeaderLease) -> bool:
        return bool(self._fetchall(RESIGN_LEADERSHIP, self._params(**checks.leader_token(lease))))

    def current_leader(self, name: str = MAINTENANCE) -> LeaderLease | None:
        return checks.leader_lease(self._fetchone(CURRENT_LEADER, self._params(name=name)), READ.time)
