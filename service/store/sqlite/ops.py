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
from service.store.sqlfiles import statements
from service.store.sqlite.connection import status
from service.store.sqlite.queries import (
    ACTIVE_COUNTS,
    DURATION_BUCKETS,
    FAILURE_GROUPS,
    LEASE_EXPIRIES,
    OUTCOMES,
    PICKUP_BUCKETS,
    QUEUE_STATS,
    THROUGHPUT,
)
from service.store.sqlite.reads import Reads
from service.store.sqlite.statements import TENANT_COUNTER
from service.store.sqlite.timestamps import from_text, to_text
from service.store.sqlite.workflows import rearm_dependents, settle_dependents

_SQL = statements("sqlite")

CANCEL_JOB = _SQL["cancel_job"]
MAKE_DUE = _SQL["make_due"]
FIND_REPLAYABLE = _SQL["find_replayable"]
REPLAY_JOB = _SQL["replay_job"]
CLEAR_FAILED_ITEMS = _SQL["clear_failed_items"]
RECORD_REPLAY = _SQL["record_replay"]


class Operations(Reads):
    """cancel, replay, failure groups, outcomes, histograms, throughput, queue statistics."""

    def cancel(self, job_id: uuid.UUID, tenant: str | None = None) -> JobStatus:
        with self._write() as (conn, now):
            row = conn.execute(CANCEL_JOB, {"job_id": str(job_id), "tenant": tenant, "now": now}).fetchone()
            if row is not None and row["state"] == JobState.CANCELLED:
                settle_dependents(conn, now, [job_id])
        if row is not None:
            return status(row)
        raise checks.not_cancellable(self.get(job_id, tenant))

    def make_due(self, job_id: uuid.UUID) -> JobStatus:
        with self._write() as (conn, now):
            row = conn.execute(MAKE_DUE, {"job_id": str(job_id), "now": now}).fetchone()
        if row is not None:
            return status(row)
        raise checks.not_waiting(self.get(job_id))

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
                # the jobs their failure cancelled, and their own parents
                rearm_dependents(conn, now, [uuid.UUID(job["id"]) for job in picked], by)
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
