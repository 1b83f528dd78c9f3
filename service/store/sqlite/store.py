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
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from service.errors import (
    InvalidInput,
    InvalidTransition,
    JobNotFound,
    LeaseLost,
    LimitNotFound,
    TokenNotFound,
    Unauthorized,
)
from service.explain import SHOWN_RUNNING_IDS, JobFacts
from service.jobs import (
    DEFAULT_MAX_ATTEMPTS,
    JSON,
    LEASE_EXPIRED_GROUP,
    ActiveCount,
    ApiToken,
    Attempt,
    AttemptOutcome,
    ClaimedJob,
    ClaimRequest,
    Completion,
    FailResult,
    FailureGroup,
    Heartbeat,
    ItemOutcome,
    ItemPage,
    ItemQuery,
    JobPage,
    JobQuery,
    JobState,
    JobStatus,
    KindOutcomes,
    Lease,
    NewJob,
    QueueStats,
    ReapResult,
    ReplayFilter,
    StatusRead,
    Throughput,
    WorkerInfo,
    error_group,
    new_job_id,
    replayable_states,
)
from service.limits import Limit, ScopeUsage, check_scope, job_scopes, rate_window
from service.payloads import (
    check_claim,
    check_lease_seconds,
    check_page_size,
    check_progress,
    check_throughput_window,
    dump_json,
    storable_error,
    token_tenant,
    validate_new_jobs,
)
from service.retry import Decision
from service.store.base import (
    PRUNE_BATCH,
    REAP_BATCH,
    ROLLUP_BATCH,
    RUNNING_JOBS_LIMIT,
    Clock,
    DatabaseHealth,
    Listener,
)
from service.store.encoding import (
    bucket_counts,
    check_reap_delays,
    item_rows,
    retry_params,
    substring_pattern,
)
from service.store.fairness import Candidate, advance_cursor, choose, tenants_to_visit
from service.store.rows import (
    Readers,
    api_token,
    attempt,
    claimed_job,
    item_page,
    job_facts,
    job_status,
    limit_row,
    scope_usage_row,
    worker_info,
)
from service.store.sqlite import rollup
from service.store.sqlite.errors import translate_errors
from service.store.sqlite.listener import SilentListener
from service.store.sqlite.queries import (
    ACTIVE_COUNTS,
    ADMIN_TOKEN,
    COUNT_PRUNABLE,
    CREATE_TOKEN,
    DEREGISTER_WORKER,
    DURATION_BUCKETS,
    EXPLAIN_FACTS,
    FAILURE_GROUPS,
    GET_JOB,
    GET_PAYLOAD,
    GET_RESULT,
    JOB_ATTEMPTS,
    JOB_EXISTS,
    LEASE_EXPIRIES,
    LIST_ALL_JOBS,
    LIST_ITEMS,
    LIST_JOBS,
    LIST_LIMITS,
    LIST_TOKENS,
    LIST_WORKERS,
    OUTCOMES,
    PICKUP_BUCKETS,
    PRUNE_FINISHED,
    QUEUE_STATS,
    REGISTER_WORKER,
    REVOKE_TOKEN,
    RUNNING_IN_SCOPE,
    RUNNING_JOBS,
    SCOPE_USAGE,
    TENANT_FOR_TOKEN,
    THROUGHPUT,
    TOUCH_WORKER,
)
from service.store.sqlite.schedules import SqliteSchedules
from service.store.sqlite.statements import (
    ACKNOWLEDGE_CANCEL,
    CANCEL_JOB,
    CHANGED_SCOPES,
    CLAIM_JOB,
    CLEAR_FAILED_ITEMS,
    CLOSE_ATTEMPT,
    COMPLETE_JOBS,
    COUNT_STARTS,
    COUNTERS,
    DEFAULT_TENANT_LIMITED,
    DELETE_LIMIT,
    DROP_COUNTER,
    ENQUEUE_JOBS,
    FAIL_JOB,
    FIND_REPLAYABLE,
    GIVE_BACK,
    NEXT_TENANT,
    NOW,
    OPEN_ATTEMPT,
    PRIOR_ITEM_STATES,
    PUT_COUNTER,
    READ_ATTEMPT_RECEIPT,
    READ_BY_IDEMPOTENCY_KEYS,
    REAP_EXPIRED,
    RECORD_REPLAY,
    RELEASE_JOB,
    RENEW_LEASE,
    REPLAY_JOB,
    SET_LIMIT,
    STORE_ITEM,
    STORE_RESULT,
    TENANT_COUNTER,
    TENANT_JOBS,
    TENANT_RUNNING,
    TENANT_WEIGHT,
)
from service.store.sqlite.timestamps import from_text, to_text

BUSY_TIMEOUT_SECONDS = 30.0


class SqliteStore(SqliteSchedules):
    """The queue in one SQLite file. One connection per store, shared under a lock."""

    def __init__(
        self,
        database_url: str,
        *,
        clock: Clock | None = None,
    ) -> None:
        if not database_url.startswith("sqlite:///"):
            raise InvalidInput("a SQLite URL looks like sqlite:///path/to/file.db")
        self.database_url = database_url
        self.path = database_url[len("sqlite:///") :]
        self._clock = clock
        self._claim_cursor = ""  # the fair claim's place among tenants (service.store.fairness)
        self._lock = threading.Lock()
        with translate_errors():
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
            register_functions(self._conn)

    # -- plumbing -------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[tuple[sqlite3.Connection, str]]:
        """A write transaction holding the file's write lock, and the instant it began."""
        with self._lock, translate_errors():
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn, self._now()
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[tuple[sqlite3.Connection, str]]:
        with self._lock, translate_errors():
            yield self._conn, self._now()

    def _now(self) -> str:
        if self._clock is not None:
            return to_text(self._clock())
        return str(self._conn.execute(NOW).fetchone()["now"])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- the dead-letter path, rates and retention ------------------------------------
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

    def prune(self, older_than_seconds: float, limit: int = PRUNE_BATCH) -> int:
        with self._write() as (conn, now):
            cursor = conn.execute(PRUNE_FINISHED, {"now": now, "older_than": float(older_than_seconds), "limit": limit})
            return cursor.rowcount

    def count_prunable(self, older_than_seconds: float) -> int:
        with self._read() as (conn, now):
            row = conn.execute(COUNT_PRUNABLE, {"now": now, "older_than": float(older_than_seconds)}).fetchone()
        return int(row["count"])

    def fold_rollup(
        self, bounds: Sequence[float], bucket_seconds: Sequence[float], settle_seconds: float, limit: int = ROLLUP_BATCH
    ) -> int:
        with self._write() as (conn, now):
            return rollup.fold(conn, now, bounds, bucket_seconds, settle_seconds, limit)

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
        return [worker_info(row, _READ) for row in rows]

    # -- API tokens -------------------------------------------------------------------
    def create_token(self, tenant: str, token_hash: str, name: str | None = None, admin: bool = False) -> ApiToken:
        tenant = token_tenant(tenant, token_hash, admin)
        with self._write() as (conn, now):
            row = conn.execute(
                CREATE_TOKEN,
                {
                    "id": str(new_job_id()),
                    "tenant": tenant,
                    "name": name,
                    "token_hash": token_hash,
                    "admin": admin,
                    "now": now,
                },
            ).fetchone()
        return api_token(row, _READ)

    def tenant_for_token(self, token_hash: str) -> str | None:
        with self._read() as (conn, _now):
            row = conn.execute(TENANT_FOR_TOKEN, {"token_hash": token_hash}).fetchone()
        return row["tenant"] if row else None

    def admin_token(self, token_hash: str) -> ApiToken | None:
        with self._read() as (conn, _now):
            row = conn.execute(ADMIN_TOKEN, {"token_hash": token_hash}).fetchone()
        return api_token(row, _READ) if row else None

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
    def enqueue(self, job: NewJob, *, connection: object | None = None) -> JobStatus:
        return self.enqueue_many([job], connection=connection)[0]

    def enqueue_many(self, jobs: Sequence[NewJob], *, connection: object | None = None) -> list[JobStatus]:
        if connection is not None:
            raise InvalidInput(
                "an enqueue inside the caller's transaction (connection=) needs PostgreSQL; "
                "on SQLite the Queue commits each enqueue itself"
            )
        validate_new_jobs(jobs)
        rows = [
            {
                "id": str(new_job_id()),
                "tenant": job.tenant,
                "queue": job.queue,
                "kind": job.kind,
                "payload": dump_json(job.payload, "payload"),
                "priority": job.priority,
                "max_attempts": DEFAULT_MAX_ATTEMPTS if job.max_attempts is None else job.max_attempts,
                "max_attempts_default": job.max_attempts is None,
                "total": job.total,
                "delay": float(job.delay_seconds),
                "run_after": to_text(job.run_after) if job.run_after else None,
                "concurrency_key": job.concurrency_key,
                "idempotency_key": job.idempotency_key,
            }
            for job in jobs
        ]
        statuses = []
        with self._write() as (conn, now):
            for row in rows:
                found = conn.execute(ENQUEUE_JOBS, {**row, "now": now}).fetchone()
                if found is None:
                    found = conn.execute(READ_BY_IDEMPOTENCY_KEYS, {**row, "now": now}).fetchone()
                statuses.append(_status(found))
            for tenant in sorted({job.tenant for job in jobs}):
                conn.execute(TENANT_COUNTER, {"tenant": tenant})
        return statuses

    # -- the worker's hot path ------------------------------------------------------
    def claim(
        self,
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        kinds: Sequence[str] | None = None,
        max_attempts: Mapping[str, int] | None = None,
    ) -> list[ClaimedJob]:
        check_claim(worker, limit, lease_seconds)
        kinds_json = json.dumps(list(kinds)) if kinds is not None else None
        kind_max_attempts = json.dumps(dict(max_attempts or {}))
        with self._write() as (conn, now):
            picked = self._pick(conn, now, list(queues), kinds_json, limit)
            rows = []
            for job in picked:
                row = conn.execute(
                    CLAIM_JOB,
                    {
                        "id": job.id,
                        "now": now,
                        "worker": worker,
                        "lease_seconds": float(lease_seconds),
                        "kind_max_attempts": kind_max_attempts,
                    },
                ).fetchone()
                rows.append(row)
                conn.execute(
                    OPEN_ATTEMPT,
                    {
                        "job_id": row["id"],
                        "claim": row["claims"],
                        "attempt": row["attempts"],
                        "owner": worker,
                        "due_at": row["run_after"],
                        "now": now,
                    },
                )
            self._count_starts(conn, now, picked)
        self._claim_cursor = advance_cursor(self._claim_cursor, (row["tenant"] for row in rows))
        rows.sort(key=lambda r: r["id"])
        return [claimed_job(r, worker, _READ) for r in rows]

    def _pick(
        self, conn: sqlite3.Connection, now: str, queues: list[str], kinds: str | None, limit: int
    ) -> list[Candidate]:
        """The fair claim (PostgreSQL's CLAIM_JOBS, in steps under the write lock): visit
        tenants from the cursor, round robin; rank each one's next jobs by virtual time;
        take them while every scope has room. The counters read here are exact: no other
        writer runs until this transaction commits."""
        every_tenant_limited = bool(conn.execute(DEFAULT_TENANT_LIMITED).fetchone()["limited"])
        candidates: list[Candidate] = []
        rooms: dict[str, int | None] = {}
        instant = from_text(now)
        visited = 0
        for tenant in self._tenants_from_cursor(conn, now, queues, kinds):
            tenant_scope = f"tenant:{tenant}"
            usage = self._usage(conn, [tenant_scope])
            room = usage[tenant_scope].room(instant) if tenant_scope in usage else (0 if every_tenant_limited else None)
            if room is not None and room <= 0:
                continue  # full: look further, so a free slot is not left idle
            jobs = [
                job
                for queue in queues
                for job in conn.execute(
                    TENANT_JOBS, {"queue": queue, "tenant": tenant, "now": now, "kinds": kinds, "limit": limit}
                )
            ]
            jobs.sort(key=lambda j: (-j["priority"], j["run_after"], j["id"]))
            running = conn.execute(TENANT_RUNNING, {"tenant": tenant}).fetchone()["running"]
            weight = conn.execute(TENANT_WEIGHT, {"tenant": tenant}).fetchone()["weight"]
            for place, job in enumerate(jobs[:limit], start=1):
                candidates.append(
                    Candidate(
                        id=job["id"],
                        tenant=tenant,
                        scopes=tuple(job_scopes(tenant, job["kind"], job["queue"], job["concurrency_key"])),
                        virtual_time=(running + place) / weight,
                        visit=visited,
                        place=place,
                    )
                )
            visited += 1
            if visited == tenants_to_visit(limit):
                break
        scopes = sorted({scope for job in candidates for scope in job.scopes})
        rooms = {scope: usage.room(instant) for scope, usage in self._usage(conn, scopes).items()}
        return choose(candidates, rooms, every_tenant_limited=every_tenant_limited, limit=limit)

    def _tenants_from_cursor(
        self, conn: sqlite3.Connection, now: str, queues: list[str], kinds: str | None
    ) -> Iterator[str]:
        """Tenants with a due job, in name order from just after the cursor, wrapping around once."""
        cursor = self._claim_cursor
        after, lap = cursor, 0
        while True:
            found = [
                row["tenant"]
                for queue in queues
                for row in conn.execute(NEXT_TENANT, {"queue": queue, "after": after, "now": now, "kinds": kinds})
            ]
            tenant = min(found) if found else None
            if tenant is None:
                if lap == 1 or cursor == "":
                    return
                after, lap = "", 1
                continue
            if lap == 1 and tenant > cursor:
                return
            yield tenant
            after = tenant

    @staticmethod
    def _usage(conn: sqlite3.Connection, scopes: Sequence[str]) -> dict[str, ScopeUsage]:
        rows = conn.execute(COUNTERS, {"scopes": json.dumps(list(scopes))}).fetchall()
        return {row["scope"]: scope_usage_row(row, _READ) for row in rows}

    @staticmethod
    def _count_starts(conn: sqlite3.Connection, now: str, picked: Sequence[Candidate]) -> None:
        taken = Counter(scope for job in picked for scope in job.scopes)
        instant = from_text(now)
        for scope, usage in sorted(SqliteStore._usage(conn, list(taken)).items()):
            window = to_text(rate_window(instant, usage.per_seconds)) if usage.per_seconds else None
            conn.execute(COUNT_STARTS, {"scope": scope, "jobs": taken[scope], "window": window})

    def heartbeat(
        self,
        lease: Lease,
        lease_seconds: float,
        done: int | None = None,
        total: int | None = None,
        checkpoint: JSON | None = None,
        items: Sequence[ItemOutcome] = (),
    ) -> Heartbeat:
        check_lease_seconds(lease_seconds)
        check_progress(done, total)
        encoded = None if checkpoint is None else dump_json(checkpoint, "checkpoint")
        rows = item_rows(lease, items)
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
                    **_item_deltas(conn, lease, rows),
                },
            ).fetchone()
            if row is not None:
                _store_items(conn, rows, now)
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
        rows_per_job = [item_rows(item.lease, item.items) for item in finished]
        lost = []
        with self._write() as (conn, now):
            for item, body, rows in zip(finished, bodies, rows_per_job, strict=True):
                lease = item.lease
                params = {
                    **_fence(lease),
                    "now": now,
                    "result_id": str(new_job_id()),
                    "body": body,
                    "done": item.done,
                    "total": item.total,
                    **_item_deltas(conn, lease, rows),
                }
                if conn.execute(COMPLETE_JOBS, params).fetchone() is None:
                    if _receipt(conn, lease, AttemptOutcome.SUCCEEDED) is None:
                        lost.append(lease)
                    continue
                conn.execute(STORE_RESULT, params)
                _store_items(conn, rows, now)
                _close_attempt(conn, lease, now, AttemptOutcome.SUCCEEDED)
        return lost

    def complete_and_claim(
        self, finished: Sequence[Completion], claim: ClaimRequest
    ) -> tuple[list[Lease], list[ClaimedJob]]:
        # Two write transactions, one after the other: a local file has no round trip to save.
        check_claim(claim.worker, claim.limit, claim.lease_seconds)
        lost = self.complete_many(finished)
        return lost, self.claim(
            claim.worker, claim.queues, claim.limit, claim.lease_seconds, claim.kinds, dict(claim.max_attempts)
        )

    def fail(self, lease: Lease, error: str, decision: Decision) -> FailResult:
        if not isinstance(error, str) or not error.strip():
            raise InvalidInput("error must be a non-empty string")
        error = storable_error(error)
        retry, delay = retry_params(decision)
        with self._write() as (conn, now):
            row = conn.execute(
                FAIL_JOB,
                {
                    **_fence(lease),
                    "now": now,
                    "retry": retry,
                    "delay": delay,
                    "error": error,
                    "error_group": error_group(error),
                },
            ).fetchone()
            if row is None:
                row = _require_receipt(conn, lease, AttemptOutcome.FAILED)
            else:
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

    def reap(self, delays: Sequence[float], limit: int = REAP_BATCH) -> ReapResult:
        delays = check_reap_delays(delays)
        counts = {JobState.QUEUED: 0, JobState.FAILED: 0, JobState.CANCELLED: 0}
        with self._write() as (conn, now):
            for job in conn.execute(REAP_EXPIRED, {"now": now, "limit": limit}).fetchall():
                lease = Lease(uuid.UUID(job["id"]), job["lease_owner"], job["attempts"], job["claims"])
                error = (
                    None
                    if job["cancel_requested"]
                    else (
                        f"lease expired {job['expiries']} time(s); last on attempt {job['attempts']}"
                        f" of {job['max_attempts']} (worker {job['lease_owner']}"
                        " stopped heartbeating: crashed, killed or cut off)"
                    )
                )
                retry = job["attempts"] < job["max_attempts"]  # the retry budget, as retry.decide keeps it
                row = conn.execute(
                    FAIL_JOB,
                    {
                        **_fence(lease),
                        "now": now,
                        "retry": retry,
                        "delay": delays[job["attempts"] - 1],
                        "error": error,
                        "error_group": None if error is None else LEASE_EXPIRED_GROUP,
                    },
                ).fetchone()
                _close_attempt(conn, lease, now, AttemptOutcome.LEASE_EXPIRED, "lease expired")
                counts[JobState(row["state"])] += 1
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

    def explain_facts(self, job_id: uuid.UUID, tenant: str | None = None, *, workers_seen_within: float) -> JobFacts:
        status = self.get(job_id, tenant)
        usage = self.scope_usage(job_scopes(status.tenant, status.kind, status.queue, status.concurrency_key))
        workers = self.list_workers(workers_seen_within)
        with self._read() as (conn, now):
            facts = conn.execute(
                EXPLAIN_FACTS,
                {
                    "job_id": str(job_id),
                    "queue": status.queue,
                    "tenant": status.tenant,
                    "priority": status.priority,
                    "run_after": to_text(status.run_after),
                    "now": now,
                },
            ).fetchone()

            def running_ids(scope: str) -> list[Any]:
                rows = conn.execute(RUNNING_IN_SCOPE, {"tenant": tenant, "scope": scope, "limit": SHOWN_RUNNING_IDS})
                return [row["id"] for row in rows.fetchall()]

            return job_facts(status, facts, from_text(now), _READ, usage, running_ids, workers)

    # -- limits -----------------------------------------------------------------------
    def set_limit(self, limit: Limit) -> None:
        with self._write() as (conn, now):
            conn.execute(
                SET_LIMIT,
                {
                    "scope": limit.scope,
                    "concurrency": limit.concurrency,
                    "rate": limit.rate,
                    "per_seconds": limit.per_seconds,
                    "weight": limit.weight,
                    "now": now,
                },
            )
            _refresh_counters(conn, limit.scope)

    def delete_limit(self, scope: str) -> None:
        check_scope(scope)
        with self._write() as (conn, _now):
            if conn.execute(DELETE_LIMIT, {"scope": scope}).fetchone() is None:
                raise LimitNotFound(scope)
            _refresh_counters(conn, scope)

    def list_limits(self, tenant: str | None = None) -> list[Limit]:
        with self._read() as (conn, _now):
            return [limit_row(row) for row in conn.execute(LIST_LIMITS, {"tenant": tenant}).fetchall()]

    def scope_usage(self, scopes: Sequence[str] | None = None) -> list[ScopeUsage]:
        with self._read() as (conn, _now):
            rows = conn.execute(SCOPE_USAGE, {"scopes": None if scopes is None else json.dumps(list(scopes))})
            return [scope_usage_row(row, _READ) for row in rows.fetchall()]

    def replay(self, which: ReplayFilter, by: str, dry_run: bool = False) -> list[uuid.UUID]:
        params = {
            "states": json.dumps(replayable_states(which)),
            "failed_items": which.failed_items,
            "tenant": which.tenant,
            "ids": json.dumps([str(i) for i in which.ids]) if which.ids else None,
            "kind": which.kind,
            "error_like": substring_pattern(which.error_like),
            "error_group": which.error_group,
            "since": to_text(which.since) if which.since else None,
        }
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
                row = (
                    None
                    if tenant is None
                    else conn.execute(GET_JOB, {"job_id": str(read.job_id), "tenant": tenant, "now": now}).fetchone()
                )
                found.append(None if row is None else _status(row))
        return found

    def list_items(self, query: ItemQuery) -> ItemPage:
        check_page_size(query.limit)
        params = {
            "job_id": str(query.job_id),
            "tenant": query.tenant,
            "state": query.state.value if query.state else None,
            "after_index": -1 if query.after_index is None else query.after_index,
            "limit": query.limit + 1,
        }
        with self._read() as (conn, _now):
            if conn.execute(JOB_EXISTS, params).fetchone() is None:
                raise JobNotFound(query.job_id)
            rows = conn.execute(LIST_ITEMS, params).fetchall()
        return item_page(rows, query.limit, _READ)

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
                LIST_ALL_JOBS if query.tenant is None else LIST_JOBS,
                {
                    "now": now,
                    "tenant": query.tenant,
                    "state": query.state.value if query.state else None,
                    "kind": query.kind,
                    "queue": query.queue,
                    "created_after": to_text(query.created_after) if query.created_after else None,
                    "after_id": str(query.after_id) if query.after_id else None,
                    "limit": query.limit + 1,
                },
            ).fetchall()
        items = [_status(row) for row in rows[: query.limit]]
        more = len(rows) > query.limit
        return JobPage(items=items, next_after_id=items[-1].id if more else None)

    def job_attempts(self, job_id: uuid.UUID) -> list[Attempt]:
        with self._read() as (conn, _now):
            rows = conn.execute(JOB_ATTEMPTS, {"job_id": str(job_id)}).fetchall()
        return [attempt(row, _READ) for row in rows]

    def running_jobs(self, limit: int = RUNNING_JOBS_LIMIT) -> list[JobStatus]:
        with self._read() as (conn, now):
            rows = conn.execute(RUNNING_JOBS, {"now": now, "limit": limit}).fetchall()
        return [_status(row) for row in rows]


def register_functions(conn: sqlite3.Connection) -> None:
    """What the store's SQL calls that SQLite lacks: PostgreSQL's width_bucket (the migrations' backfills too)."""
    conn.create_function("width_bucket", 2, _width_bucket, deterministic=True)


def _width_bucket(value: float | None, bounds_json: str) -> int | None:
    """PostgreSQL's width_bucket(value, thresholds): how many thresholds are <= value."""
    if value is None:
        return None
    return bisect.bisect_right(json.loads(bounds_json), value)


def _fence(lease: Lease) -> dict[str, Any]:
    return {"job_id": str(lease.job_id), "claim": lease.claim, "attempt": lease.attempt, "owner": lease.owner}


def _item_deltas(conn: sqlite3.Connection, lease: Lease, rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    """What writing ``rows`` changes in the job's counts (an outcome replaced is taken back)."""
    ok = sum(1 for row in rows if row["state"] == "ok")
    failed = len(rows) - ok
    if rows:
        indexes = json.dumps([row["item_index"] for row in rows])
        for prior in conn.execute(PRIOR_ITEM_STATES, {"job_id": str(lease.job_id), "indexes": indexes}):
            if prior["state"] == "ok":
                ok -= prior["n"]
            else:
                failed -= prior["n"]
    return {"ok_delta": ok, "failed_delta": failed}


def _store_items(conn: sqlite3.Connection, rows: Sequence[dict[str, Any]], now: str) -> None:
    conn.executemany(STORE_ITEM, [{**row, "now": now} for row in rows])


def _receipt(conn: sqlite3.Connection, lease: Lease, *outcomes: AttemptOutcome) -> sqlite3.Row | None:
    """The fenced write matched nothing: did it land earlier (a retried call)? Else the lease is lost."""
    row = conn.execute(READ_ATTEMPT_RECEIPT, _fence(lease)).fetchone()
    return row if row is not None and row["outcome"] in outcomes else None


def _require_receipt(conn: sqlite3.Connection, lease: Lease, *outcomes: AttemptOutcome) -> sqlite3.Row:
    row = _receipt(conn, lease, *outcomes)
    if row is None:
        raise LeaseLost(lease.job_id, lease.attempt)
    return row


def _refresh_counters(conn: sqlite3.Connection, scope: str) -> None:
    """The counters a limit change touched, made to agree with limits and the running jobs
    (PostgreSQL's REFRESH_COUNTERS; here the write lock alone keeps the count exact)."""
    for row in conn.execute(CHANGED_SCOPES, {"scope": scope}).fetchall():
        if row["concurrency"] is None and row["rate"] is None:
            conn.execute(DROP_COUNTER, {"scope": row["scope"]})
        else:
            conn.execute(PUT_COUNTER, dict(row))


def _close_attempt(
    conn: sqlite3.Connection, lease: Lease, now: str, outcome: AttemptOutcome, error: str | None = None
) -> None:
    conn.execute(CLOSE_ATTEMPT, {**_fence(lease), "now": now, "outcome": outcome.value, "error": error})
    conn.execute(GIVE_BACK, {"job_id": str(lease.job_id)})  # the run ended: its slots come back now


def _fail_result(state: str, run_after: str | None) -> FailResult:
    queued = state == JobState.QUEUED
    return FailResult(state=JobState(state), run_after=from_text(run_after) if queued and run_after else None)


# SQLite holds times, ids, name lists and JSON as text.
_READ = Readers(time=from_text, ident=uuid.UUID, names=lambda text: tuple(json.loads(text)), json=json.loads)


def _status(row: Mapping[str, Any]) -> JobStatus:  # a sqlite3.Row reads as one
    return job_status(row, _READ)
