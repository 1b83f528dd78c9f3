"""The SQLite store: one host, many processes sharing one file.

WAL mode lets readers (the API) run beside the one writer; a busy timeout makes
processes queue for the write lock instead of failing. Every write runs under
``BEGIN IMMEDIATE``, which takes the write lock up front, so a claim's read and
its update cannot interleave with another process's claim: that is SQLite's
answer to ``FOR UPDATE SKIP LOCKED``. There is no LISTEN/NOTIFY; workers poll.

"Now" is read once per operation from SQLite's clock (``NOW``), or from the
injected test clock, and every lease and due time is computed from it in SQL.
Timestamps are UTC text ``YYYY-MM-DD HH:MM:SS.SSS``, which sorts as it compares.
"""

from __future__ import annotations

import bisect
import json
import sqlite3
import threading
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from service.errors import (
    InvalidInput,
    InvalidTransition,
    JobNotFound,
    LeaseLost,
    StoreUnavailable,
    TokenNotFound,
    Unauthorized,
)
from service.jobs import (
    JSON,
    LEASE_EXPIRED_GROUP,
    ActiveCount,
    ApiToken,
    AttemptOutcome,
    ClaimedJob,
    Completion,
    FailResult,
    FailureGroup,
    Heartbeat,
    JobPage,
    JobQuery,
    JobState,
    JobStatus,
    KindOutcomes,
    Lease,
    NewJob,
    Notification,
    QueueStats,
    ReapResult,
    ReplayFilter,
    StatusRead,
    WorkerInfo,
    error_group,
    new_job_id,
    validate_new_job,
)
from service.retry import RetryPolicy
from service.store.base import PRUNE_BATCH, REAP_BATCH, Clock, DatabaseHealth, Listener
from service.store.encoding import (
    bucket_counts,
    check_lease_seconds,
    check_page_size,
    check_progress,
    dump_json,
    storable_error,
    substring_pattern,
)
from service.store.rows import Readers, api_token, claimed_job, job_status, worker_info

TIME_FORMAT = "%Y-%m-%d %H:%M:%f"
BUSY_TIMEOUT_SECONDS = 30.0

NOW = "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now') AS now"

STATUS_COLUMNS = """
    id, tenant, queue, kind, state, priority, attempts, max_attempts, done, total, error,
    cancel_requested, concurrency_key, idempotency_key, lease_owner, lease_expires_at,
    run_after, created_at, started_at, finished_at, updated_at, result_id,
    (state = 'running' AND lease_expires_at < :now) AS stale
"""

# -- enqueue_job --
# A tenant's idempotency key that is already taken inserts nothing; the caller
# then reads the existing job with READ_BY_IDEMPOTENCY_KEY.
ENQUEUE_JOB = """
INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                  done, total, run_after, concurrency_key, idempotency_key, created_at, updated_at)
VALUES (:id, :tenant, :queue, :kind, :payload, 'queued', :priority, 0, :max_attempts,
        0, :total, coalesce(:run_after, strftime('%Y-%m-%d %H:%M:%f', :now, :delay || ' seconds')),
        :concurrency_key, :idempotency_key, :now, :now)
ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING """ + STATUS_COLUMNS

READ_BY_IDEMPOTENCY_KEY = """
SELECT """ + STATUS_COLUMNS + """
FROM jobs WHERE tenant = :tenant AND idempotency_key = :idempotency_key
"""

# -- claim_jobs --
# Invariant 1: BEGIN IMMEDIATE holds the write lock from the read to the update,
# so no other claimer can pick the same row. attempts + 1 and the lease are set
# in the same statement: the fencing token is born with the claim.
# Invariant 2: the lease expiry is computed from the clock read under the lock.
CLAIM_JOBS = """
UPDATE jobs
SET state = 'running',
    attempts = attempts + 1,
    claims = claims + 1,
    lease_owner = :worker,
    lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', :now, :lease_seconds || ' seconds'),
    started_at = :now,
    updated_at = :now
WHERE id IN (
    SELECT id FROM jobs
    WHERE state = 'queued'
      AND queue IN (SELECT value FROM json_each(:queues))
      AND run_after <= :now
      AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
    ORDER BY priority DESC, run_after, id
    LIMIT :limit
)
RETURNING id, kind, queue, tenant, payload, checkpoint, done, total, attempts, claims, max_attempts,
          lease_expires_at, run_after
"""

# Invariant 3: every attempt has its row from the moment it starts.
OPEN_ATTEMPT = """
INSERT INTO job_attempts (job_id, claim, attempt, worker, due_at, started_at)
VALUES (:job_id, :claim, :attempt, :owner, :due_at, :now)
"""

# -- renew_lease --
# Invariant 1: fenced on the token; a reaped or reclaimed job matches no row.
# Heartbeat and progress are one statement.
RENEW_LEASE = """
UPDATE jobs
SET lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', :now, :lease_seconds || ' seconds'),
    done = coalesce(:done, done),
    total = coalesce(:total, total),
    checkpoint = coalesce(:checkpoint, checkpoint),
    updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner
  AND state = 'running'
RETURNING cancel_requested
"""

# -- complete_job --
# Invariant 1: fenced; the result row is written only after this matched.
COMPLETE_JOB = """
UPDATE jobs
SET state = 'succeeded',
    result_id = :result_id,
    -- the handler's last progress, if it came after the last heartbeat; success with a total is all done
    total = coalesce(:total, total),
    done = CASE WHEN coalesce(:total, total) > 0 THEN coalesce(:total, total) ELSE coalesce(:done, done) END,
    lease_expires_at = NULL,
    finished_at = :now,
    updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner
  AND state = 'running'
RETURNING id
"""

STORE_RESULT = """
INSERT INTO job_results (id, job_id, body, created_at) VALUES (:result_id, :job_id, :body, :now)
"""

# -- fail_job --
# Invariant 1: fenced. Invariant 3: the error goes on the job and on its attempt.
# The next state was decided by service.retry from the row read under the lock.
FAIL_JOB = """
UPDATE jobs
SET state = :next_state,
    error = :error,
    error_group = :error_group,
    run_after = CASE WHEN :next_state = 'queued'
                     THEN strftime('%Y-%m-%d %H:%M:%f', :now, :delay || ' seconds') ELSE run_after END,
    lease_owner = CASE WHEN :next_state = 'queued' THEN NULL ELSE lease_owner END,
    lease_expires_at = NULL,
    finished_at = CASE WHEN :next_state = 'queued' THEN NULL ELSE :now END,
    updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner
  AND state = 'running'
RETURNING state, run_after
"""

READ_FENCED = """
SELECT attempts, max_attempts, cancel_requested FROM jobs
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner
  AND state = 'running'
"""

# -- release_job --
# Graceful shutdown: back to queued now, the attempt not charged (attempts - 1);
# a job whose cancellation was requested ends cancelled instead, as in fail and reap.
RELEASE_JOB = """
UPDATE jobs
SET state = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'queued' END,
    attempts = CASE WHEN cancel_requested THEN attempts ELSE attempts - 1 END,
    lease_owner = CASE WHEN cancel_requested THEN lease_owner END,
    lease_expires_at = NULL,
    run_after = CASE WHEN cancel_requested THEN run_after ELSE :now END,
    finished_at = CASE WHEN cancel_requested THEN :now END,
    updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner
  AND state = 'running'
RETURNING state
"""

# -- acknowledge_cancel --
ACKNOWLEDGE_CANCEL = """
UPDATE jobs
SET state = 'cancelled', lease_expires_at = NULL, finished_at = :now, updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner
  AND state = 'running'
RETURNING id
"""

CLOSE_ATTEMPT = """
UPDATE job_attempts
SET finished_at = :now, outcome = :outcome, error = :error
WHERE job_id = :job_id AND claim = :claim AND finished_at IS NULL
"""

# After a finish whose outcome is unknown, the attempt's own row is the receipt.
READ_ATTEMPT_RECEIPT = """
SELECT a.outcome, j.state, j.run_after
FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
WHERE a.job_id = :job_id AND a.claim = :claim AND a.worker = :owner
"""

# -- reap_expired --
# Invariant 2: running jobs past their lease, compared with the store's clock,
# in id order and in bounded batches. Idempotent: a second reaper finds nothing.
FIND_EXPIRED = """
SELECT j.id, j.attempts, j.claims, j.max_attempts, j.lease_owner, j.cancel_requested, j.error, j.error_group,
       (SELECT count(*) FROM job_attempts AS a
        WHERE a.job_id = j.id AND a.outcome = 'lease_expired') + 1 AS expiries
FROM jobs AS j
WHERE j.state = 'running' AND j.lease_expires_at < :now
ORDER BY j.id
LIMIT :limit
"""

REAP_JOB = """
UPDATE jobs
SET state = :next_state,
    error = :error,
    error_group = :error_group,
    run_after = CASE WHEN :next_state = 'queued'
                     THEN strftime('%Y-%m-%d %H:%M:%f', :now, :delay || ' seconds') ELSE run_after END,
    lease_owner = CASE WHEN :next_state = 'queued' THEN NULL ELSE lease_owner END,
    lease_expires_at = NULL,
    finished_at = CASE WHEN :next_state = 'queued' THEN NULL ELSE :now END,
    updated_at = :now
WHERE id = :job_id AND state = 'running'
"""

CANCEL_JOB = """
UPDATE jobs
SET state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
    cancel_requested = (state = 'running'),
    finished_at = CASE WHEN state = 'queued' THEN :now ELSE finished_at END,
    updated_at = :now
WHERE id = :job_id AND (:tenant IS NULL OR tenant = :tenant) AND state IN ('queued', 'running')
RETURNING """ + STATUS_COLUMNS

# -- replay_jobs --
# Invariant 5: terminal jobs change only through replay, and every replay is recorded.
FIND_REPLAYABLE = """
SELECT id, state, error, attempts FROM jobs
WHERE state IN (SELECT value FROM json_each(:states))
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
  AND (:kind IS NULL OR kind = :kind)
  AND (:error_like IS NULL OR error LIKE :error_like ESCAPE '\\')
  AND (:since IS NULL OR finished_at >= :since)
ORDER BY id
"""

REPLAY_JOB = """
UPDATE jobs
SET state = 'queued', attempts = 0, error = NULL, error_group = NULL, cancel_requested = 0, lease_owner = NULL,
    lease_expires_at = NULL, run_after = :now, finished_at = NULL, updated_at = :now
WHERE id = :job_id
"""

RECORD_REPLAY = """
INSERT INTO job_replays (job_id, replayed_at, replayed_by, previous_state, previous_error,
                         previous_attempts)
VALUES (:job_id, :now, :by, :state, :error, :attempts)
"""

GET_JOB = """
SELECT """ + STATUS_COLUMNS + """
FROM jobs WHERE id = :job_id AND (:tenant IS NULL OR tenant = :tenant)
"""

GET_RESULT = """
SELECT j.state, r.body
FROM jobs AS j LEFT JOIN job_results AS r ON r.id = j.result_id
WHERE j.id = :job_id AND (:tenant IS NULL OR j.tenant = :tenant)
"""

GET_PAYLOAD = """
SELECT payload FROM jobs WHERE id = :job_id AND (:tenant IS NULL OR tenant = :tenant)
"""

LIST_JOBS = """
SELECT """ + STATUS_COLUMNS + """
FROM jobs
WHERE tenant = :tenant
  AND (:state IS NULL OR state = :state)
  AND (:kind IS NULL OR kind = :kind)
  AND (:queue IS NULL OR queue = :queue)
  AND (:created_after IS NULL OR created_at > :created_after)
  AND (:after_id IS NULL OR id < :after_id)
ORDER BY id DESC
LIMIT :limit
"""

# -- failure_groups --
# One query for the dead-letter view over a window of ix_jobs_finished_at.
FAILURE_GROUPS = """
SELECT kind, error_group, count(*) AS count, min(finished_at) AS first_seen,
       max(finished_at) AS last_seen, max(id) AS example_job_id
FROM jobs
WHERE finished_at >= :since
  AND state = 'failed'
  AND (:kind IS NULL OR kind = :kind)
  AND (:tenant IS NULL OR tenant = :tenant)
GROUP BY kind, error_group
ORDER BY count DESC, last_seen DESC
"""

OUTCOMES = """
SELECT kind,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'failed') AS failed
FROM jobs
WHERE finished_at >= strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :window || ' seconds')
  AND (:kind IS NULL OR kind = :kind)
GROUP BY kind
ORDER BY kind
"""

LEASE_EXPIRIES = """
SELECT count(*) AS expiries
FROM job_attempts
WHERE finished_at >= strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :window || ' seconds')
  AND outcome = 'lease_expired'
"""

# width_bucket is registered on the connection (see SqliteStore.__init__) to match PostgreSQL's.
DURATION_BUCKETS = """
SELECT kind,
       width_bucket((julianday(finished_at) - julianday(started_at)) * 86400.0, :bounds) AS bucket,
       count(*) AS count
FROM jobs
WHERE finished_at >= strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :window || ' seconds')
  AND state IN ('succeeded', 'failed') AND started_at IS NOT NULL
GROUP BY kind, bucket
"""

PICKUP_BUCKETS = """
SELECT j.kind,
       width_bucket((julianday(a.started_at) - julianday(a.due_at)) * 86400.0, :bounds) AS bucket,
       count(*) AS count
FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
WHERE a.finished_at >= strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :window || ' seconds')
GROUP BY j.kind, bucket
"""

QUEUE_STATS = """
SELECT queue,
       count(*) FILTER (WHERE state = 'queued') AS queued,
       count(*) FILTER (WHERE state = 'running') AS running,
       (julianday(:now) - julianday(min(run_after) FILTER (WHERE state = 'queued' AND run_after <= :now)))
           * 86400.0 AS oldest_queued_age_seconds
FROM jobs
WHERE state IN ('queued', 'running')
GROUP BY queue
ORDER BY queue
"""

ACTIVE_COUNTS = """
SELECT queue, kind, state, count(*) AS count
FROM jobs
WHERE state IN ('queued', 'running')
GROUP BY queue, kind, state
ORDER BY queue, kind, state
"""

# -- prune_finished --
# Retention in small batches, oldest first; attempts, results and replays go with
# their job (ON DELETE CASCADE, with foreign_keys on).
PRUNE_FINISHED = """
DELETE FROM jobs
WHERE id IN (
    SELECT id FROM jobs
    WHERE finished_at < strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :older_than || ' seconds')
      AND state IN ('succeeded', 'failed', 'cancelled')
    ORDER BY finished_at
    LIMIT :limit
)
"""

COUNT_PRUNABLE = """
SELECT count(*) AS count
FROM jobs
WHERE finished_at < strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :older_than || ' seconds')
  AND state IN ('succeeded', 'failed', 'cancelled')
"""

# -- workers --
REGISTER_WORKER = """
INSERT INTO workers (id, host, pid, queues, kinds, concurrency, started_at, last_seen_at)
VALUES (:id, :host, :pid, :queues, :kinds, :concurrency, :now, :now)
ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at
"""

TOUCH_WORKER = "UPDATE workers SET last_seen_at = :now WHERE id = :id"

DEREGISTER_WORKER = "DELETE FROM workers WHERE id = :id"

LIST_WORKERS = """
SELECT id, host, pid, queues, kinds, concurrency, started_at, last_seen_at
FROM workers
WHERE :within IS NULL
   OR last_seen_at > strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :within || ' seconds')
ORDER BY started_at DESC, id
"""

# -- api tokens --
CREATE_TOKEN = """
INSERT INTO api_tokens (id, tenant, name, token_hash, created_at)
VALUES (:id, :tenant, :name, :token_hash, :now)
RETURNING id, tenant, name, created_at, revoked_at
"""

TENANT_FOR_TOKEN = "SELECT tenant FROM api_tokens WHERE token_hash = :token_hash AND revoked_at IS NULL"

REVOKE_TOKEN = """
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, :now)
WHERE id = :id
RETURNING id, tenant, name, created_at, revoked_at
"""

LIST_TOKENS = """
SELECT id, tenant, name, created_at, revoked_at FROM api_tokens
WHERE :tenant IS NULL OR tenant = :tenant
ORDER BY created_at, id
"""


class SqliteStore:
    """The queue in one SQLite file. One connection per store, shared under a lock."""

    def __init__(
        self,
        database_url: str,
        *,
        retry_policy: RetryPolicy | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not database_url.startswith("sqlite:///"):
            raise InvalidInput("a SQLite URL looks like sqlite:///path/to/file.db")
        self.database_url = database_url
        self.path = database_url[len("sqlite:///") :]
        self.retry_policy = retry_policy or RetryPolicy()
        self._clock = clock
        self._lock = threading.Lock()
        with _translate():
            # mode=rw: never create an empty file here; `jobq migrate` makes the database.
            self._conn = sqlite3.connect(
                f"file:{urllib.parse.quote(self.path)}?mode=rw",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_SECONDS,
            )
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
            self._conn.create_function("width_bucket", 2, _width_bucket, deterministic=True)

    # -- plumbing -------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[tuple[sqlite3.Connection, str]]:
        """A write transaction holding the file's write lock, and the instant it began."""
        with self._lock, _translate():
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn, self._now()
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[tuple[sqlite3.Connection, str]]:
        with self._lock, _translate():
            yield self._conn, self._now()

    def _now(self) -> str:
        if self._clock is not None:
            return _to_text(self._clock())
        return str(self._conn.execute(NOW).fetchone()["now"])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- the dead-letter path, rates and retention ------------------------------------
    def failure_groups(
        self, since: datetime, kind: str | None = None, tenant: str | None = None
    ) -> list[FailureGroup]:
        with self._read() as (conn, _now):
            rows = conn.execute(
                FAILURE_GROUPS, {"since": _to_text(since), "kind": kind, "tenant": tenant}
            ).fetchall()
        return [
            FailureGroup(
                kind=row["kind"],
                error_group=row["error_group"],
                count=row["count"],
                first_seen=_from_text(row["first_seen"]),
                last_seen=_from_text(row["last_seen"]),
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

    def queue_stats(self) -> list[QueueStats]:
        with self._read() as (conn, now):
            rows = conn.execute(QUEUE_STATS, {"now": now}).fetchall()
        return [
            QueueStats(
                queue=row["queue"],
                queued=row["queued"],
                running=row["running"],
                oldest_queued_age_seconds=row["oldest_queued_age_seconds"],
            )
            for row in rows
        ]

    def active_counts(self) -> list[ActiveCount]:
        with self._read() as (conn, _now):
            rows = conn.execute(ACTIVE_COUNTS).fetchall()
        return [ActiveCount(row["queue"], row["kind"], JobState(row["state"]), row["count"]) for row in rows]

    def prune(self, older_than_seconds: float, limit: int = PRUNE_BATCH) -> int:
        with self._write() as (conn, now):
            cursor = conn.execute(
                PRUNE_FINISHED, {"now": now, "older_than": float(older_than_seconds), "limit": limit}
            )
            return cursor.rowcount

    def count_prunable(self, older_than_seconds: float) -> int:
        with self._read() as (conn, now):
            row = conn.execute(COUNT_PRUNABLE, {"now": now, "older_than": float(older_than_seconds)}).fetchone()
        return int(row["count"])

    def health_stats(self) -> DatabaseHealth:
        # SQLite has no dead tuples (VACUUM reclaims free pages) and no transaction
        # registry to read: neither is measured here.
        return DatabaseHealth(jobs_dead_tuples=None, oldest_transaction_age_seconds=None)

    # -- wake-ups -------------------------------------------------------------------
    def listen(self, channels: Sequence[str]) -> Listener:
        return SilentListener()

    # -- workers ----------------------------------------------------------------------
    def register_worker(self, worker: WorkerInfo) -> None:
        with self._write() as (conn, now):
            conn.execute(
                REGISTER_WORKER,
                {
                    "id": worker.id,
                    "host": worker.host,
                    "pid": worker.pid,
                    "queues": json.dumps(list(worker.queues)),
                    "kinds": json.dumps(list(worker.kinds)),
                    "concurrency": worker.concurrency,
                    "now": now,
                },
            )

    def touch_worker(self, worker_id: str) -> None:
        with self._write() as (conn, now):
            conn.execute(TOUCH_WORKER, {"id": worker_id, "now": now})

    def deregister_worker(self, worker_id: str) -> None:
        with self._write() as (conn, _now):
            conn.execute(DEREGISTER_WORKER, {"id": worker_id})

    def list_workers(self, seen_within_seconds: float | None = None) -> list[WorkerInfo]:
        with self._read() as (conn, now):
            rows = conn.execute(LIST_WORKERS, {"now": now, "within": seen_within_seconds}).fetchall()
        return [
            worker_info(row, _READ)
            for row in rows
        ]

    # -- API tokens -------------------------------------------------------------------
    def create_token(self, tenant: str, token_hash: str, name: str | None = None) -> ApiToken:
        if not tenant or not token_hash:
            raise InvalidInput("a token needs a tenant and a hash")
        with self._write() as (conn, now):
            row = conn.execute(
                CREATE_TOKEN,
                {"id": str(new_job_id()), "tenant": tenant, "name": name, "token_hash": token_hash, "now": now},
            ).fetchone()
        return api_token(row, _READ)

    def tenant_for_token(self, token_hash: str) -> str | None:
        with self._read() as (conn, _now):
            row = conn.execute(TENANT_FOR_TOKEN, {"token_hash": token_hash}).fetchone()
        return row["tenant"] if row else None

    def revoke_token(self, token_id: uuid.UUID) -> ApiToken:
        with self._write() as (conn, now):
            row = conn.execute(REVOKE_TOKEN, {"id": str(token_id), "now": now}).fetchone()
        if row is None:
            raise TokenNotFound(token_id)
        return api_token(row, _READ)

    def list_tokens(self, tenant: str | None = None) -> list[ApiToken]:
        with self._read() as (conn, _now):
            rows = conn.execute(LIST_TOKENS, {"tenant": tenant}).fetchall()
        return [api_token(row, _READ) for row in rows]

    # -- submitting -----------------------------------------------------------------
    def enqueue(self, job: NewJob) -> JobStatus:
        return self.enqueue_many([job])[0]

    def enqueue_many(self, jobs: Sequence[NewJob]) -> list[JobStatus]:
        for job in jobs:
            validate_new_job(job)
        rows = [
            {
                "id": str(new_job_id()),
                "tenant": job.tenant,
                "queue": job.queue,
                "kind": job.kind,
                "payload": dump_json(job.payload, "payload"),
                "priority": job.priority,
                "max_attempts": job.max_attempts,
                "total": job.total,
                "delay": float(job.delay_seconds),
                "run_after": _to_text(job.run_after) if job.run_after else None,
                "concurrency_key": job.concurrency_key,
                "idempotency_key": job.idempotency_key,
            }
            for job in jobs
        ]
        statuses = []
        with self._write() as (conn, now):
            for row in rows:
                found = conn.execute(ENQUEUE_JOB, {**row, "now": now}).fetchone()
                if found is None:
                    found = conn.execute(READ_BY_IDEMPOTENCY_KEY, {**row, "now": now}).fetchone()
                statuses.append(_status(found))
        return statuses

    # -- the worker's hot path ------------------------------------------------------
    def claim(
        self,
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        kinds: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        if limit < 1:
            raise InvalidInput("claim limit must be at least 1")
        if not worker:
            raise InvalidInput("worker must be a non-empty string")
        check_lease_seconds(lease_seconds)
        with self._write() as (conn, now):
            rows = conn.execute(
                CLAIM_JOBS,
                {
                    "now": now,
                    "worker": worker,
                    "queues": json.dumps(list(queues)),
                    "kinds": json.dumps(list(kinds)) if kinds is not None else None,
                    "limit": limit,
                    "lease_seconds": float(lease_seconds),
                },
            ).fetchall()
            conn.executemany(
                OPEN_ATTEMPT,
                [
                    {
                        "job_id": r["id"],
                        "claim": r["claims"],
                        "attempt": r["attempts"],
                        "owner": worker,
                        "due_at": r["run_after"],
                        "now": now,
                    }
                    for r in rows
                ],
            )
        rows.sort(key=lambda r: r["id"])
        return [claimed_job(r, worker, _READ) for r in rows]

    def heartbeat(
        self,
        lease: Lease,
        lease_seconds: float,
        done: int | None = None,
        total: int | None = None,
        checkpoint: JSON | None = None,
    ) -> Heartbeat:
        check_lease_seconds(lease_seconds)
        check_progress(done, total)
        encoded = None if checkpoint is None else dump_json(checkpoint, "checkpoint")
        with self._write() as (conn, now):
            row = conn.execute(
                RENEW_LEASE,
                {
                    **_fence(lease),
                    "now": now,
                    "lease_seconds": float(lease_seconds),
                    "done": done,
                    "total": total,
                    "checkpoint": encoded,
                },
            ).fetchone()
        if row is None:
            return Heartbeat(held=False, cancel_requested=False)
        return Heartbeat(held=True, cancel_requested=bool(row["cancel_requested"]))

    def complete(self, lease: Lease, result: JSON, done: int | None = None, total: int | None = None) -> None:
        if self.complete_many([Completion(lease, result, done, total)]):
            raise LeaseLost(lease.job_id, lease.attempt)

    def complete_many(self, finished: Sequence[Completion]) -> list[Lease]:
        for item in finished:
            check_progress(item.done, item.total)
        bodies = [dump_json(item.result, "result") for item in finished]
        lost = []
        with self._write() as (conn, now):
            for item, body in zip(finished, bodies, strict=True):
                lease = item.lease
                params = {
                    **_fence(lease),
                    "now": now,
                    "result_id": str(new_job_id()),
                    "body": body,
                    "done": item.done,
                    "total": item.total,
                }
                if conn.execute(COMPLETE_JOB, params).fetchone() is None:
                    if _receipt(conn, lease, AttemptOutcome.SUCCEEDED) is None:
                        lost.append(lease)
                    continue
                conn.execute(STORE_RESULT, params)
                _close_attempt(conn, lease, now, AttemptOutcome.SUCCEEDED)
        return lost

    def fail(self, lease: Lease, error: str, retryable: bool) -> FailResult:
        if not isinstance(error, str) or not error.strip():
            raise InvalidInput("error must be a non-empty string")
        error = storable_error(error)
        with self._write() as (conn, now):
            current = conn.execute(READ_FENCED, _fence(lease)).fetchone()
            if current is None:
                receipt = _require_receipt(conn, lease, AttemptOutcome.FAILED)
                return _fail_result(receipt["state"], receipt["run_after"])
            if current["cancel_requested"]:
                next_state = JobState.CANCELLED
            elif self.retry_policy.should_retry(current["attempts"], current["max_attempts"], retryable):
                next_state = JobState.QUEUED
            else:
                next_state = JobState.FAILED
            row = conn.execute(
                FAIL_JOB,
                {
                    **_fence(lease),
                    "now": now,
                    "next_state": next_state.value,
                    "error": error,
                    "error_group": error_group(error),
                    "delay": self.retry_policy.delay(lease.attempt),
                },
            ).fetchone()
            _close_attempt(conn, lease, now, AttemptOutcome.FAILED, error)
        return _fail_result(row["state"], row["run_after"])

    def release(self, lease: Lease) -> None:
        # A job whose cancellation was requested ends cancelled instead (see RELEASE_JOB).
        with self._write() as (conn, now):
            row = conn.execute(RELEASE_JOB, {**_fence(lease), "now": now}).fetchone()
            if row is None:
                _require_receipt(conn, lease, AttemptOutcome.RELEASED, AttemptOutcome.CANCELLED)
                return
            cancelled = row["state"] == JobState.CANCELLED
            _close_attempt(conn, lease, now, AttemptOutcome.CANCELLED if cancelled else AttemptOutcome.RELEASED)

    def acknowledge_cancel(self, lease: Lease) -> None:
        with self._write() as (conn, now):
            if conn.execute(ACKNOWLEDGE_CANCEL, {**_fence(lease), "now": now}).fetchone() is None:
                _require_receipt(conn, lease, AttemptOutcome.CANCELLED)
                return
            _close_attempt(conn, lease, now, AttemptOutcome.CANCELLED)


    def reap(self, limit: int = REAP_BATCH) -> ReapResult:
        counts = {JobState.QUEUED: 0, JobState.FAILED: 0, JobState.CANCELLED: 0}
        with self._write() as (conn, now):
            for job in conn.execute(FIND_EXPIRED, {"now": now, "limit": limit}).fetchall():
                if job["cancel_requested"]:
                    next_state, error, group = JobState.CANCELLED, job["error"], job["error_group"]
                else:
                    group = LEASE_EXPIRED_GROUP
                    retry = job["attempts"] < job["max_attempts"]
                    next_state = JobState.QUEUED if retry else JobState.FAILED
                    error = (
                        f"lease expired {job['expiries']} time(s); last on attempt {job['attempts']}"
                        f" of {job['max_attempts']} (worker {job['lease_owner']}"
                        " stopped heartbeating: crashed, killed or cut off)"
                    )
                conn.execute(
                    REAP_JOB,
                    {
                        "job_id": job["id"],
                        "now": now,
                        "next_state": next_state.value,
                        "error": error,
                        "error_group": group,
                        "delay": self.retry_policy.delay(job["attempts"]),
                    },
                )
                conn.execute(
                    CLOSE_ATTEMPT,
                    {
                        "job_id": job["id"],
                        "claim": job["claims"],
                        "now": now,
                        "outcome": AttemptOutcome.LEASE_EXPIRED.value,
                        "error": "lease expired",
                    },
                )
                counts[next_state] += 1
        return ReapResult(
            requeued=counts[JobState.QUEUED],
            failed=counts[JobState.FAILED],
            cancelled=counts[JobState.CANCELLED],
        )

    # -- operators and the API ------------------------------------------------------
    def cancel(self, job_id: uuid.UUID, tenant: str | None = None) -> JobStatus:
        with self._write() as (conn, now):
            row = conn.execute(CANCEL_JOB, {"job_id": str(job_id), "tenant": tenant, "now": now}).fetchone()
        if row is not None:
            return _status(row)
        current = self.get(job_id, tenant)
        raise InvalidTransition(f"job {job_id} is already {current.state.value}", current.state.value)

    def replay(self, which: ReplayFilter, by: str, dry_run: bool = False) -> list[uuid.UUID]:
        states = ["failed", "cancelled"] if which.include_cancelled or which.ids else ["failed"]
        params = {
            "states": json.dumps(states),
            "tenant": which.tenant,
            "ids": json.dumps([str(i) for i in which.ids]) if which.ids else None,
            "kind": which.kind,
            "error_like": substring_pattern(which.error_like),
            "since": _to_text(which.since) if which.since else None,
        }
        with self._write() as (conn, now):
            picked = conn.execute(FIND_REPLAYABLE, params).fetchall()
            if not dry_run:
                for job in picked:
                    conn.execute(REPLAY_JOB, {"job_id": job["id"], "now": now})
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

    def get(self, job_id: uuid.UUID, tenant: str | None = None, token_hash: str | None = None) -> JobStatus:
        with self._read() as (conn, now):
            if token_hash is not None:  # in-process reads cost no round trip: two lookups under one lock
                token = conn.execute(TENANT_FOR_TOKEN, {"token_hash": token_hash}).fetchone()
                if token is None:
                    raise Unauthorized("unknown or revoked token")
                tenant = token["tenant"]
            row = conn.execute(GET_JOB, {"job_id": str(job_id), "tenant": tenant, "now": now}).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return _status(row)

    def read_statuses(self, reads: Sequence[StatusRead]) -> list[JobStatus | None]:
        found: list[JobStatus | None] = []
        with self._read() as (conn, now):  # in-process reads cost no round trip: one lookup each, one lock
            for read in reads:
                tenant = read.tenant
                if read.token_hash is not None:
                    token = conn.execute(TENANT_FOR_TOKEN, {"token_hash": read.token_hash}).fetchone()
                    tenant = token["tenant"] if token is not None else None
                row = None if tenant is None else conn.execute(
                    GET_JOB, {"job_id": str(read.job_id), "tenant": tenant, "now": now}).fetchone()
                found.append(None if row is None else _status(row))
        return found

    def get_result(self, job_id: uuid.UUID, tenant: str | None = None) -> JSON:
        with self._read() as (conn, _now):
            row = conn.execute(GET_RESULT, {"job_id": str(job_id), "tenant": tenant}).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        if row["state"] != JobState.SUCCEEDED:
            raise InvalidTransition(f"job {job_id} has no result: it is {row['state']}", row["state"])
        return json.loads(row["body"])

    def get_payload(self, job_id: uuid.UUID, tenant: str | None = None) -> JSON:
        with self._read() as (conn, _now):
            row = conn.execute(GET_PAYLOAD, {"job_id": str(job_id), "tenant": tenant}).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return json.loads(row["payload"])

    def list_jobs(self, query: JobQuery) -> JobPage:
        check_page_size(query.limit)
        with self._read() as (conn, now):
            rows = conn.execute(
                LIST_JOBS,
                {
                    "now": now,
                    "tenant": query.tenant,
                    "state": query.state.value if query.state else None,
                    "kind": query.kind,
                    "queue": query.queue,
                    "created_after": _to_text(query.created_after) if query.created_after else None,
                    "after_id": str(query.after_id) if query.after_id else None,
                    "limit": query.limit + 1,
                },
            ).fetchall()
        items = [_status(row) for row in rows[: query.limit]]
        more = len(rows) > query.limit
        return JobPage(items=items, next_after_id=items[-1].id if more else None)


class SilentListener:
    """SQLite has no notifications: ``wait`` only sleeps, so callers fall back to polling."""

    def __init__(self) -> None:
        self._closed = threading.Event()

    def wait(self, timeout: float) -> list[Notification]:
        self._closed.wait(timeout)
        return []

    def close(self) -> None:
        self._closed.set()


def _width_bucket(value: float | None, bounds_json: str) -> int | None:
    """PostgreSQL's width_bucket(value, thresholds): how many thresholds are <= value."""
    if value is None:
        return None
    return bisect.bisect_right(json.loads(bounds_json), value)


def _fence(lease: Lease) -> dict[str, Any]:
    return {"job_id": str(lease.job_id), "claim": lease.claim, "attempt": lease.attempt, "owner": lease.owner}


def _receipt(conn: sqlite3.Connection, lease: Lease, *outcomes: AttemptOutcome) -> sqlite3.Row | None:
    """The fenced write matched nothing: did it land earlier (a retried call)? Else the lease is lost."""
    row = conn.execute(READ_ATTEMPT_RECEIPT, _fence(lease)).fetchone()
    return row if row is not None and row["outcome"] in outcomes else None


def _require_receipt(conn: sqlite3.Connection, lease: Lease, *outcomes: AttemptOutcome) -> sqlite3.Row:
    row = _receipt(conn, lease, *outcomes)
    if row is None:
        raise LeaseLost(lease.job_id, lease.attempt)
    return row


def _close_attempt(
    conn: sqlite3.Connection, lease: Lease, now: str, outcome: AttemptOutcome, error: str | None = None
) -> None:
    conn.execute(CLOSE_ATTEMPT, {**_fence(lease), "now": now, "outcome": outcome.value, "error": error})


def _fail_result(state: str, run_after: str | None) -> FailResult:
    queued = state == JobState.QUEUED
    return FailResult(state=JobState(state), run_after=_from_text(run_after) if queued and run_after else None)


def _to_text(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise InvalidInput("timestamps must carry a time zone")
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%d %H:%M:%S.") + f"{utc.microsecond // 1000:03d}"


def _from_text(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)


def _maybe_time(text: str | None) -> datetime | None:
    return _from_text(text) if text is not None else None


# SQLite holds times, ids, name lists and JSON as text.
_READ = Readers(time=_from_text, ident=uuid.UUID, names=lambda text: tuple(json.loads(text)), json=json.loads)


def _status(row: sqlite3.Row) -> JobStatus:
    return job_status(row, _READ)


@contextmanager
def _translate() -> Iterator[None]:
    """The one place where sqlite3's errors become jobq's."""
    try:
        yield
    except sqlite3.IntegrityError as exc:
        raise InvalidInput(f"rejected by the schema: {exc}") from exc
    except sqlite3.OperationalError as exc:
        if "unable to open database file" in str(exc) or "no such table" in str(exc):
            raise StoreUnavailable(f"no migrated SQLite database here (run jobq migrate): {exc}") from exc
        raise StoreUnavailable(f"SQLite unavailable: {exc}") from exc
