"""The operators' path on PostgreSQL: cancel and replay (their statements here), the
dead-letter reads, rates and queue statistics (theirs in queries.py)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

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
from service.store.postgres.limits import tenant_counters
from service.store.postgres.queries import (
    ACTIVE_COUNTS,
    DURATION_BUCKETS,
    FAILURE_GROUPS,
    LEASE_EXPIRIES,
    OUTCOMES,
    PICKUP_BUCKETS,
    QUEUE_STATS,
    STATUS_COLUMNS,
    THROUGHPUT,
)
from service.store.postgres.reads import Reads
from service.store.postgres.statements import NOTIFY_CHANGED

# -- cancel_job --
# A queued job is cancelled at once; a running one is asked to stop and its
# worker sees cancel_requested on its next heartbeat. Terminal jobs match nothing.
CANCEL_JOB = (
    """
UPDATE jobs AS j
SET state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
    cancel_requested = (state = 'running'),
    finished_at = CASE WHEN state = 'queued' THEN coalesce(%(now)s::timestamptz, now()) ELSE finished_at END,
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(job_id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND state IN ('queued', 'running')
RETURNING """
    + STATUS_COLUMNS
    + ", "
    + NOTIFY_CHANGED
)


# -- replay_jobs --
# Invariant 5: a terminal job changes only through replay, and each replay is
# recorded in job_replays with who asked and what the job was before. A replay of
# failed items picks jobs (succeeded ones too) that have some, and removes only those outcomes.
REPLAY_JOBS = (
    """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
picked AS (
    SELECT id, state, error, attempts
    FROM jobs
    WHERE state = ANY(%(states)s::text[])
      AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
      AND (cardinality(%(ids)s::uuid[]) = 0 OR id = ANY(%(ids)s::uuid[]))
      AND (%(kind)s::text IS NULL OR kind = %(kind)s)
      AND (%(error_like)s::text IS NULL OR error ILIKE %(error_like)s)
      AND (%(error_group)s::text IS NULL OR error_group = %(error_group)s)
      AND (%(since)s::timestamptz IS NULL OR finished_at >= %(since)s::timestamptz)
      AND (NOT %(failed_items)s OR items_failed > 0)
    ORDER BY id
    FOR UPDATE SKIP LOCKED
),
cleared AS (
    -- Re-running only the failed items: their outcomes go, the ok ones stay (the next attempt skips those).
    DELETE FROM job_items AS i
    USING picked
    WHERE %(failed_items)s AND i.job_id = picked.id AND i.state = 'failed'
),
replayed AS (
    UPDATE jobs AS j
    SET state = 'queued', attempts = 0, error = NULL, error_group = NULL, cancel_requested = false,
        lease_owner = NULL, lease_expires_at = NULL, run_after = n.ts, finished_at = NULL,
        items_failed = CASE WHEN %(failed_items)s THEN 0 ELSE j.items_failed END,
        done = CASE WHEN %(failed_items)s THEN j.items_ok ELSE j.done END,
        updated_at = n.ts
    FROM picked, n
    WHERE j.id = picked.id
    RETURNING j.id, j.tenant, """
    + NOTIFY_CHANGED
    + """
),"""
    + tenant_counters("replayed")
    + """,
recorded AS (
    INSERT INTO job_replays (job_id, replayed_at, replayed_by, previous_state, previous_error,
                             previous_attempts)
    SELECT picked.id, n.ts, %(by)s, picked.state, picked.error, picked.attempts FROM picked, n
)
SELECT id FROM replayed ORDER BY id
"""
)


class Operations(Reads):
    """cancel, replay, failure groups, outcomes, histograms, throughput, queue statistics."""

    def cancel(self, job_id: uuid.UUID, tenant: str | None = None) -> JobStatus:
        row = self._fetchone(CANCEL_JOB, self._params(job_id=job_id, tenant=tenant))
        if row is not None:
            return status(row)
        raise checks.not_cancellable(self.get(job_id, tenant))

    def replay(self, which: ReplayFilter, by: str, dry_run: bool = False) -> list[uuid.UUID]:
        params = self._params(**checks.replay_args(which), by=by)

        def run() -> list[uuid.UUID]:
            with self._connection() as conn:
                with conn.transaction(force_rollback=dry_run):
                    return [row["id"] for row in conn.execute(REPLAY_JOBS, params).fetchall()]

        return self._retrying(run)

    def failure_groups(self, since: datetime, kind: str | None = None, tenant: str | None = None) -> list[FailureGroup]:
        rows = self._fetchall(FAILURE_GROUPS, self._params(since=since, kind=kind, tenant=tenant))
        return [FailureGroup(**row) for row in rows]

    def outcomes(self, window_seconds: float, kind: str | None = None) -> list[KindOutcomes]:
        rows = self._fetchall(OUTCOMES, self._params(window=float(window_seconds), kind=kind))
        return [KindOutcomes(**row) for row in rows]

    def lease_expiries(self, window_seconds: float) -> int:
        row = self._fetchone(LEASE_EXPIRIES, self._params(window=float(window_seconds)))
        return int(row["expiries"]) if row else 0

    def duration_buckets(self, window_seconds: float, bounds: Sequence[float]) -> dict[str, list[int]]:
        return self._buckets(DURATION_BUCKETS, window_seconds, bounds)

    def pickup_buckets(self, window_seconds: float, bounds: Sequence[float]) -> dict[str, list[int]]:
        return self._buckets(PICKUP_BUCKETS, window_seconds, bounds)

    def _buckets(self, statement: str, window_seconds: float, bounds: Sequence[float]) -> dict[str, list[int]]:
        rows = self._fetchall(statement, self._params(window=float(window_seconds), bounds=[float(b) for b in bounds]))
        return bucket_counts(rows, len(bounds))

    def throughput(self, window_seconds: float, buckets: int) -> list[Throughput]:
        width = check_throughput_window(window_seconds, buckets)
        rows = self._fetchall(
            THROUGHPUT, self._params(window=float(window_seconds), buckets=buckets, bucket_seconds=width)
        )
        return [Throughput(**row) for row in rows]

    def queue_stats(self) -> list[QueueStats]:
        return [QueueStats(**row) for row in self._fetchall(QUEUE_STATS, self._params())]

    def active_counts(self) -> list[ActiveCount]:
        rows = self._fetchall(ACTIVE_COUNTS, self._params())
        return [ActiveCount(row["queue"], row["kind"], JobState(row["state"]), row["count"]) for row in rows]
