"""The operators' path on PostgreSQL: cancel and replay (their statements here), the
dead-letter reads, rates and queue statistics (theirs in queries.py)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from service.jobs import (
    ActiveCount,
    FailureGroup,
    JobState,
    JobStatus,
    KindOutcomes,
    QueueStats,
    ReplayFilter,
    Throughput,
)
from service.payloads import check_throughput_window
from service.store import checks
from service.store.encoding import bucket_counts
from service.store.postgres.connection import status
from service.store.postgres.queries import (
    ACTIVE_COUNTS,
    DURATION_BUCKETS,
    FAILURE_GROUPS,
    LEASE_EXPIRIES,
    OUTCOMES,
    PICKUP_BUCKETS,
    QUEUE_STATS,
    THROUGHPUT,
)
from service.store.postgres.reads import Reads
from service.store.postgres.statements import KEY_LOOKUP_PLANNER
from service.store.postgres.workflows import SETTLE_DEPENDENTS, Workflows
from service.store.sqlfiles import statements

_SQL = statements("postgres")

CANCEL_JOB = _SQL["cancel_job"]
MAKE_DUE = _SQL["make_due"]
REPLAY_JOBS = _SQL["replay_jobs"]


class Operations(Reads, Workflows):
    """cancel, replay, failure groups, outcomes, histograms, throughput, queue statistics."""

    def cancel(self, job_id: uuid.UUID, tenant: str | None = None) -> JobStatus:
        params = self._params(job_id=job_id, tenant=tenant)

        def run() -> dict[str, Any] | None:
            # A queued job cancelled now settles its dependents in the same transaction (see _ending).
            with self._connection() as conn:
                with conn.pipeline():
                    cancelled = conn.execute(CANCEL_JOB, params)
                    conn.execute(KEY_LOOKUP_PLANNER)  # for SETTLE_DEPENDENTS (workflows.sql, ``waiting``)
                    conn.execute(SETTLE_DEPENDENTS, self._params(ids=[job_id]))
                return cancelled.fetchone()

        row = self._retrying(run)
        if row is not None:
            return status(row)
        raise checks.not_cancellable(self.get(job_id, tenant))

    def make_due(self, job_id: uuid.UUID) -> JobStatus:
        row = self._fetchone(MAKE_DUE, self._params(job_id=job_id))
        if row is not None:
            return status(row)
        raise checks.not_waiting(self.get(job_id))

    def replay(self, which: ReplayFilter, by: str, dry_run: bool = False) -> list[uuid.UUID]:
        params = self._params(**checks.replay_args(which), by=by)

        def run() -> list[uuid.UUID]:
            with self._connection() as conn:
                with conn.transaction(force_rollback=dry_run):
                    replayed = [row["id"] for row in conn.execute(REPLAY_JOBS, params).fetchall()]
                    self._rearm(conn, replayed, by)  # the jobs their failure cancelled, and their own parents
                    return replayed

        return self._retrying(run)

    def failure_groups(self, since: datetime, kind: str | None = None, tenant: str | None = None) -> list[FailureGroup]:
        rows = self._fetchall(FAILURE_GROUPS, self._params(since=since, kind=kind, tenant=tenant), replay=True)
        return [FailureGroup(**row) for row in rows]

    def outcomes(self, window_seconds: float, kind: str | None = None) -> list[KindOutcomes]:
        rows = self._fetchall(OUTCOMES, self._params(window=float(window_seconds), kind=kind), replay=True)
        return [KindOutcomes(**row) for row in rows]

    def lease_expiries(self, window_seconds: float) -> int:
        row = self._fetchone(LEASE_EXPIRIES, self._params(window=float(window_seconds)), replay=True)
        return int(row["expiries"]) if row else 0

    def duration_buckets(self, window_seconds: float, bounds: Sequence[float]) -> dict[str, list[int]]:
        return self._buckets(DURATION_BUCKETS, window_seconds, bounds)

    def pickup_buckets(self, window_seconds: float, bounds: Sequence[float]) -> dict[str, list[int]]:
        return self._buckets(PICKUP_BUCKETS, window_seconds, bounds)

    def _buckets(self, statement: str, window_seconds: float, bounds: Sequence[float]) -> dict[str, list[int]]:
        rows = self._fetchall(
            statement, self._params(window=float(window_seconds), bounds=[float(b) for b in bounds]), replay=True
        )
        return bucket_counts(rows, len(bounds))

    def throughput(self, window_seconds: float, buckets: int) -> list[Throughput]:
        width = check_throughput_window(window_seconds, buckets)
        rows = self._fetchall(
            THROUGHPUT, self._params(window=float(window_seconds), buckets=buckets, bucket_seconds=width), replay=True
        )
        return [Throughput(**row) for row in rows]

    def queue_stats(self) -> list[QueueStats]:
        return [QueueStats(**row) for row in self._fetchall(QUEUE_STATS, self._params(), replay=True)]

    def active_counts(self) -> list[ActiveCount]:
        rows = self._fetchall(ACTIVE_COUNTS, self._params(), replay=True)
        return [ActiveCount(row["queue"], row["kind"], JobState(row["state"]), row["count"]) for row in rows]
