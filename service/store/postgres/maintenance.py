"""What the fleet's leading worker runs besides its jobs, on PostgreSQL: the reaper of expired leases
(REAP_EXPIRED), the pruner (retention), the daily rollup's fold (its SQL in rollup.py),
and the database's health figures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from service.jobs import LEASE_EXPIRED_ERROR, LEASE_EXPIRED_GROUP, ReapResult
from service.store import checks
from service.store.base import (
    PRUNE_BATCH,
    REAP_BATCH,
    ROLLUP_BATCH,
    DatabaseHealth,
    LeaderLease,
    OpenTransaction,
)
from service.store.postgres.leadership import Fenced
from service.store.postgres.queries import HEALTH_STATS
from service.store.postgres.rollup import FOLD_ROLLUP
from service.store.postgres.statements import KEY_LOOKUP_PLANNER
from service.store.postgres.workflows import SETTLE_DEPENDENTS
from service.store.sqlfiles import statements

_SQL = statements("postgres")

REAP_EXPIRED = _SQL["reap_expired"]
PRUNE_FINISHED = _SQL["prune_finished"]
PRUNE_ROLLUP = _SQL["prune_rollup"]
COUNT_PRUNABLE = _SQL["count_prunable"]


class Maintenance(Fenced):
    """reap, prune, prune_rollup, count_prunable, fold_rollup, health_stats; the writes fenced by ``leader``."""

    def reap(
        self, delays: Sequence[float], limit: int = REAP_BATCH, *, leader: LeaderLease | None = None
    ) -> ReapResult:
        params = self._params(
            limit=limit,
            lease_expired=LEASE_EXPIRED_GROUP,
            lease_expired_error=LEASE_EXPIRED_ERROR,
            delays=checks.reap_delays(delays),
        )

        def reap(conn: psycopg.Connection[dict[str, Any]]) -> list[dict[str, Any]]:
            # The jobs it ended failed or cancelled settle their dependents in its transaction.
            with conn.transaction():
                rows = conn.execute(REAP_EXPIRED, params).fetchall()
                parents = [job_id for row in rows for job_id in row["parents"] or ()]
                if parents:
                    conn.execute(KEY_LOOKUP_PLANNER)  # for SETTLE_DEPENDENTS (workflows.sql, ``waiting``)
                    conn.execute(SETTLE_DEPENDENTS, self._params(ids=parents))
                return rows

        rows = self._fenced(leader, reap)
        return checks.reap_result({row["state"]: row["jobs"] for row in rows})

    def prune(self, older_than_seconds: float, limit: int = PRUNE_BATCH, *, leader: LeaderLease | None = None) -> int:
        params = self._params(older_than=float(older_than_seconds), limit=limit)
        return self._fenced(leader, lambda conn: conn.execute(PRUNE_FINISHED, params).rowcount)

    def prune_rollup(self, older_than_seconds: float, *, leader: LeaderLease | None = None) -> int:
        params = self._params(older_than=float(older_than_seconds))
        row = self._fenced(leader, lambda conn: conn.execute(PRUNE_ROLLUP, params).fetchone())
        return int(row["deleted"]) if row else 0

    def count_prunable(self, older_than_seconds: float) -> int:
        row = self._fetchone(COUNT_PRUNABLE, self._params(older_than=float(older_than_seconds)), replay=True)
        return int(row["count"]) if row else 0

    def fold_rollup(
        self,
        bounds: Sequence[float],
        bucket_seconds: Sequence[float],
        settle_seconds: float,
        limit: int = ROLLUP_BATCH,
        *,
        leader: LeaderLease | None = None,
    ) -> int:
        params = self._params(
            bounds=list(bounds), bucket_seconds=list(bucket_seconds), settle=float(settle_seconds), limit=limit
        )
        row = self._fenced(leader, lambda conn: conn.execute(FOLD_ROLLUP, params).fetchone())
        return int(row["folded"]) if row else 0

    def health_stats(self) -> DatabaseHealth:
        row = self._fetchone(HEALTH_STATS, {}, replay=True)
        if row is None:
            return DatabaseHealth(jobs_dead_tuples=None, oldest_transaction_age_seconds=None)
        dead = row["jobs_dead_tuples"]
        holder = None
        if row["state"] is not None:  # a transaction is open (the oldest's state is never NULL)
            holder = OpenTransaction(
                pid=row["pid"],
                usename=row["usename"],
                application_name=row["application_name"],
                state=row["state"],
                xmin_age=row["xmin_age"],
            )
        return DatabaseHealth(
            jobs_dead_tuples=int(dead) if dead is not None else None,
            oldest_transaction_age_seconds=float(row["oldest_transaction_age_seconds"]),
            oldest_transaction=holder,
            replication_xmin_age=int(row["replication_xmin_age"]),
        )
