"""The operators' path on SQLite: cancel and replay (their statements here), the
dead-letter reads, rates and queue statistics (theirs in queries.py)."""

from __future__ import annotations

import json
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
from service.store.sqlite.connection import status
from service.store.sqlite.queries import (
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
from service.store.sqlite.reads import Reads
from service.store.sqlite.statements import TENANT_COUNTER
from service.store.sqlite.timestamps import from_text, to_text

CANCEL_JOB = (
    """
UPDATE jobs
SET state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
    cancel_requested = (state = 'running'),
    finished_at = CASE WHEN state = 'queued' THEN :now ELSE finished_at END,
    updated_at = :now
WHERE id = :job_id AND (:tenant IS NULL OR tenant = :tenant) AND state IN ('queued', 'running')
RETURNING """
    + STATUS_COLUMNS
)


# -- replay_jobs --
# Invariant 5: terminal jobs change only through replay, and every replay is recorded.
FIND_REPLAYABLE = """
SELECT id, tenant, state, error, attempts FROM jobs
WHERE state IN (SELECT value FROM json_each(:states))
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
  AND (:kind IS NULL OR kind = :kind)
  AND (:error_like IS NULL OR error LIKE :error_like ESCAPE '\\')
  AND (:error_group IS NULL OR error_group = :error_group)
  AND (:since IS NULL OR finished_at >= :since)
  AND (NOT :failed_items OR items_failed > 0)
ORDER BY id
"""


REPLAY_JOB = """
UPDATE jobs
SET state = 'queued', attempts = 0, error = NULL, error_group = NULL, cancel_requested = 0, lease_owner = NULL,
    lease_expires_at = NULL, run_after = :now, finished_at = NULL,
    items_failed = CASE WHEN :failed_items THEN 0 ELSE items_failed END,
    done = CASE WHEN :failed_items THEN items_ok ELSE done END,
    updated_at = :now
WHERE id = :job_id
"""


# A replay of failed items: their outcomes go, the ok ones stay (the next attempt skips those).
CLEAR_FAILED_ITEMS = """
DELETE FROM job_items WHERE job_id = :job_id AND state = 'failed'
"""


RECORD_REPLAY = """
INSERT INTO job_replays (job_id, replayed_at, replayed_by, previous_state, previous_error,
                         previous_attempts)
VALUES (:job_id, :now, :by, :state, :error, :attempts)
"""


class Operations(Reads):
    """cancel, replay, failure groups, outcomes, histograms, throughput, queue statistics."""

    def cancel(self, job_id: uuid.UUID, tenant: str | None = None) -> JobStatus:
        with self._write() as (conn, now):
            row = conn.execute(CANCEL_JOB, {"job_id": str(job_id), "tenant": tenant, "now": now}).fetchone()
        if row is not None:
            return status(row)
        raise checks.not_cancellable(self.get(job_id, tenant))

    def replay(self, which: ReplayFilter, by: str, dry_run: bool = False) -> list[uuid.UUID]:
        params = checks.replay_args(which)
        params["states"] = json.dumps(params["states"])
        params["ids"] = json.dumps([str(i) for i in which.ids]) if which.ids else None
        params["since"] = to_text(which.since) if which.since else None
        with self._write() as (conn, now):
            picked = conn.execute(FIND_REPLAYABLE, params).fetchall()
            if not dry_run:
                for tenant in sorted({job["tenant"] for job in picked}):
                    conn.execute(TENANT_COUNTER, {"tenant": tenant})
                for job in picked:
                    if which.failed_items:
                        conn.execute(CLEAR_FAILED_ITEMS, {"job_id": job["id"]})
                    conn.execute(REPLAY_JOB, {"job_id": job["id"], "now": now, "failed_items": which.failed_items})
                    conn.execute(
                        RECORD_REPLAY,
                        {
                            "job_id": job["id"],
                            "now": now,
                            "by": by,
                            "state": job["state"],
                            "error": job["error"],
                            "attempts": job["attempts"],
                        },
                    )
        return [uuid.UUID(job["id"]) for job in picked]

    def failure_groups(self, since: datetime, kind: str | None = None, tenant: str | None = None) -> list[FailureGroup]:
        with self._read() as (conn, _now):
            rows = conn.execute(FAILURE_GROUPS, {"since": to_text(since), "kind": kind, "tenant": tenant}).fetchall()
        return [
            FailureGroup(
                kind=row["kind"],
                error_group=row["error_group"],
                count=row["count"],
                first_seen=from_text(row["first_seen"]),
                last_seen=from_text(row["last_seen"]),
                example_job_id=uuid.UUID(row["example_job_id"]),
            )
            for row in rows
        ]

    def outcomes(self, window_seconds: float, kind: str | None = None) -> list[KindOutcomes]:
        with self._read() as (conn, now):
            rows = conn.execute(OUTCOMES, {"now": now, "window": float(window_seconds), "kind": kind}).fetchall()
        return [KindOutcomes(kind=row["kind"], succeeded=row["succeeded"], failed=row["failed"]) for row in rows]

    def lease_expiries(self, window_seconds: float) -> int:
        with self._read() as (conn, now):
            row = conn.execute(LEASE_EXPIRIES, {"now": now, "window": float(window_seconds)}).fetchone()
        return int(row["expiries"])

    def duration_buckets(self, window_seconds: float, bounds: Sequence[float]) -> dict[str, list[int]]:
        return self._buckets(DURATION_BUCKETS, window_seconds, bounds)

    def pickup_buckets(self, window_seconds: float, bounds: Sequence[float]) -> dict[str, list[int]]:
        return self._buckets(PICKUP_BUCKETS, window_seconds, bounds)

    def _buckets(self, statement: str, window_seconds: float, bounds: Sequence[float]) -> dict[str, list[int]]:
        params = {"window": float(window_seconds), "bounds": json.dumps([float(b) for b in bounds])}
        with self._read() as (conn, now):
            rows = conn.execute(statement, {**params, "now": now}).fetchall()
        return bucket_counts(rows, len(bounds))

    def throughput(self, window_seconds: float, buckets: int) -> list[Throughput]:
        width = check_throughput_window(window_seconds, buckets)
        params = {"window": float(window_seconds), "buckets": buckets, "bucket_seconds": width}
        with self._read() as (conn, now):
            rows = conn.execute(THROUGHPUT, {**params, "now": now}).fetchall()
        return [Throughput(row["queue"], row["bucket"], row["succeeded"], row["failed"]) for row in rows]

    def queue_stats(self) -> list[QueueStats]:
        with self._read() as (conn, now):
            rows = conn.execute(QUEUE_STATS, {"now": now}).fetchall()
        return [
            QueueStats(
                queue=row["queue"],
                queued=row["queued"],
                running=row["running"],
                oldest_queued_age_seconds=row["oldest_queued_age_seconds"],
                due=row["due"],
            )
            for row in rows
        ]

    def active_counts(self) -> list[ActiveCount]:
        with self._read() as (conn, _now):
            rows = conn.execute(ACTIVE_COUNTS).fetchall()
        return [ActiveCount(row["queue"], row["kind"], JobState(row["state"]), row["count"]) for row in rows]
