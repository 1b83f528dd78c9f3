"""What the fleet's leading worker runs besides its jobs, on SQLite: the reaper of expired leases
(REAP_EXPIRED, then the fenced FAIL_JOB per job), the pruner (retention) and the daily
rollup's fold (its steps in rollup.py)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence

from service.jobs import LEASE_EXPIRED_GROUP, AttemptOutcome, JobState, Lease, ReapResult, lease_expired_error
from service.store import checks
from service.store.base import PRUNE_BATCH, REAP_BATCH, ROLLUP_BATCH, DatabaseHealth, LeaderLease
from service.store.sqlfiles import statements
from service.store.sqlite import rollup
from service.store.sqlite.connection import Connected, close_attempt, fence
from service.store.sqlite.leadership import check_leader
from service.store.sqlite.statements import FAIL_JOB
from service.store.sqlite.workflows import settle_dependents

_SQL = statements("sqlite")

REAP_EXPIRED = _SQL["reap_expired"]
PRUNE_FINISHED = _SQL["prune_finished"]
PRUNE_ROLLUP_COUNTS = _SQL["prune_rollup_counts"]
PRUNE_ROLLUP_HISTOGRAMS = _SQL["prune_rollup_histograms"]
COUNT_PRUNABLE = _SQL["count_prunable"]


class Maintenance(Connected):
    """reap, prune, prune_rollup, count_prunable, fold_rollup, health_stats; the writes fenced by ``leader``."""

    def reap(
        self, delays: Sequence[float], limit: int = REAP_BATCH, *, leader: LeaderLease | None = None
    ) -> ReapResult:
        delays = checks.reap_delays(delays)
        counts: Counter[str] = Counter()
        with self._write() as (conn, now):
            check_leader(conn, now, leader)
            for job in conn.execute(REAP_EXPIRED, {"now": now, "limit": limit}).fetchall():
                lease = Lease(uuid.UUID(job["id"]), job["lease_owner"], job["attempts"], job["claims"])
                error = (
                    None
                    if job["cancel_requested"]
                    else lease_expired_error(job["expiries"], job["attempts"], job["max_attempts"], job["lease_owner"])
                )
                retry = job["attempts"] < job["max_attempts"]  # the retry budget, as retry.decide keeps it
                row = conn.execute(
                    FAIL_JOB,
                    {
                        **fence(lease),
                        "now": now,
                        "retry": retry,
                        "delay": delays[job["attempts"] - 1],
                        "error": error,
                        "error_group": None if error is None else LEASE_EXPIRED_GROUP,
                    },
                ).fetchone()
                close_attempt(conn, lease, now, AttemptOutcome.LEASE_EXPIRED, LEASE_EXPIRED_GROUP)
                counts[row["state"]] += 1
                if row["state"] in (JobState.FAILED, JobState.CANCELLED):
                    settle_dependents(conn, now, [lease.job_id])
        return checks.reap_result(counts)

    def prune(self, older_than_seconds: float, limit: int = PRUNE_BATCH, *, leader: LeaderLease | None = None) -> int:
        with self._write() as (conn, now):
            check_leader(conn, now, leader)
            cursor = conn.execute(PRUNE_FINISHED, {"now": now, "older_than": float(older_than_seconds), "limit": limit})
            return cursor.rowcount

    def prune_rollup(self, older_than_seconds: float, *, leader: LeaderLease | None = None) -> int:
        with self._write() as (conn, now):
            check_leader(conn, now, leader)
            values = {"now": now, "older_than": float(older_than_seconds)}
            return sum(conn.execute(sql, values).rowcount for sql in (PRUNE_ROLLUP_COUNTS, PRUNE_ROLLUP_HISTOGRAMS))

    def count_prunable(self, older_than_seconds: float) -> int:
        with self._read() as (conn, now):
            row = conn.execute(COUNT_PRUNABLE, {"now": now, "older_than": float(older_than_seconds)}).fetchone()
        return int(row["count"])

    def fold_rollup(
        self,
        bounds: Sequence[float],
        bucket_seconds: Sequence[float],
        settle_seconds: float,
        limit: int = ROLLUP_BATCH,
        *,
        leader: LeaderLease | None = None,
    ) -> int:
        with self._write() as (conn, now):
            check_leader(conn, now, leader)
            return rollup.fold(conn, now, bounds, bucket_seconds, settle_seconds, limit)

    def health_stats(self) -> DatabaseHealth:
        # SQLite has no dead tuples (VACUUM reclaims free pages) and no transaction
        # registry to read: neither is measured here.
        return DatabaseHealth(jobs_dead_tuples=None, oldest_transaction_age_seconds=None)
