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
from service.store.sqlfiles import statements

T = TypeVar("T")

_SQL = statements("postgres")

ACQUIRE_LEADERSHIP = _SQL["acquire_leadership"]

RESIGN_LEADERSHIP = _SQL["resign_leadership"]

CURRENT_LEADER = _SQL["current_leader"]

CHECK_LEADER = _SQL["check_leader"]


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
        return checks.leader_lease(self._fetchone(CURRENT_LEADER, self._params(name=name), replay=True), READ.time)
