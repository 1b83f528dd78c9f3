"""The PostgreSQL store: psycopg 3, a small pool, SKIP LOCKED claims, LISTEN/NOTIFY.

Every hot-path statement is a named constant below with the invariant it keeps.
Each is a single statement (data-modifying CTEs), so claim, heartbeat, complete,
fail and reap are one round trip each and never hold a transaction open while a
handler runs. ``%(now)s`` is NULL in production, so ``coalesce`` picks the
database clock; tests pass a pinned instant instead.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar, cast

import psycopg
from psycopg.pq import ExecStatus
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from service.errors import (
    InvalidInput,
    InvalidTransition,
    JobNotFound,
    LeaseLost,
    LimitNotFound,
    StoreUnavailable,
    TokenNotFound,
    Unauthorized,
)
from service.explain import SHOWN_RUNNING_IDS, JobFacts
from service.jobs import (
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
    ItemState,
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
    queued_status,
    replayable_states,
)
from service.limits import Limit, ScopeUsage, check_scope, job_scopes
from service.payloads import (
    check_claim,
    check_lease_seconds,
    check_page_size,
    check_progress,
    check_throughput_window,
    dump_batch,
    dump_json,
    storable_error,
    storable_json,
    token_tenant,
    validate_new_jobs,
)
from service.retry import Decision
from service.store.base import PRUNE_BATCH, REAP_BATCH, RUNNING_JOBS_LIMIT, Clock, DatabaseHealth, Listener
from service.store.encoding import (
    bucket_counts,
    check_reap_delays,
    item_rows,
    retry_params,
    substring_pattern,
)
from service.store.fairness import advance_cursor, tenants_to_visit
from service.store.postgres.caller import caller_connection
from service.store.postgres.errors import Retryable, translate_errors
from service.store.postgres.listener import PostgresListener, connection_defaults
from service.store.postgres.queries import (
    ACTIVE_COUNTS,
    ADMIN_TOKEN,
    COUNT_PRUNABLE,
    CREATE_TOKEN,
    DEREGISTER_WORKER,
    DURATION_BUCKETS,
    EXPLAIN_FACTS,
    FAILURE_GROUPS,
    GET_JOB,
    GET_JOB_FOR_TOKEN,
    GET_PAYLOAD,
    GET_RESULT,
    HEALTH_STATS,
    JOB_ATTEMPTS,
    LEASE_EXPIRIES,
    LIST_ALL_JOBS,
    LIST_FAILED_ITEMS,
    LIST_ITEMS,
    LIST_JOBS,
    LIST_LIMITS,
    LIST_TOKENS,
    LIST_WORKERS,
    OUTCOMES,
    PICKUP_BUCKETS,
    PRUNE_FINISHED,
    QUEUE_STATS,
    READ_STATUSES,
    REGISTER_WORKER,
    REVOKE_TOKEN,
    RUNNING_IN_SCOPE,
    RUNNING_JOBS,
    SCOPE_USAGE,
    TENANT_FOR_TOKEN,
    THROUGHPUT,
    TOUCH_WORKER,
)
from service.store.postgres.statements import (
    ACKNOWLEDGE_CANCEL,
    CANCEL_JOB,
    CLAIM_JOBS,
    COMPLETE_JOBS,
    DELETE_LIMIT,
    ENQUEUE_JOBS,
    FAIL_JOB,
    LOCK_COUNTERS,
    READ_ATTEMPT_RECEIPT,
    READ_BY_IDEMPOTENCY_KEYS,
    REAP_EXPIRED,
    REFRESH_COUNTERS,
    RELEASE_JOB,
    RENEW_LEASE,
    REPLAY_JOBS,
    SET_LIMIT,
)
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

_RETRIES = 5
T = TypeVar("T")


class PostgresStore:
    """The queue on PostgreSQL. Holds a bounded pool; uses a connection only per statement."""

    def __init__(
        self,
        database_url: str,
        *,
        pool_size: int = 2,
        notify: bool = True,
        clock: Clock | None = None,
        pool_timeout: float = 10.0,
    ) -> None:
        self.database_url = database_url
        self.notify = notify
        self._clock = clock
        self._claim_cursor = ""  # the fair claim's place among tenants (service.store.fairness)
        self._pool = ConnectionPool(
            database_url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "row_factory": dict_row, **connection_defaults(database_url)},
            timeout=pool_timeout,
            open=True,
            name="jobq",
        )

    # -- plumbing -------------------------------------------------------------------
    def _params(self, **values: Any) -> dict[str, Any]:
        values["now"] = self._clock() if self._clock else None
        values["notify"] = self.notify
        return values

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        with translate_errors():
            try:
                with self._pool.connection() as conn:
                    # The pool's connections are made with row_factory=dict_row (see __init__).
                    yield cast("psycopg.Connection[dict[str, Any]]", conn)
            except PoolTimeout as exc:
                raise StoreUnavailable(f"no PostgreSQL connection: {self._why_unreachable()}") from exc

    def _why_unreachable(self) -> str:
        """The pool only says it timed out; one direct attempt tells the reason (refused, no such database…)."""
        try:
            with psycopg.connect(self.database_url, **connection_defaults(self.database_url)):
                return "every pooled connection is busy"
        except psycopg.Error as exc:
            return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__

    def _retrying(self, operation: Callable[[], T]) -> T:
        """Retry deadlocks and serialization failures with jitter; nothing else."""
        for tries in range(_RETRIES):
            try:
                return operation()
            except Retryable as exc:
                if tries == _RETRIES - 1:
                    raise StoreUnavailable(f"gave up after {_RETRIES} tries: {exc}") from exc
                time.sleep(random.uniform(0, 0.01 * 2**tries))
        raise AssertionError("unreachable")

    def _fetchall(self, statement: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        def run() -> list[dict[str, Any]]:
            with self._connection() as conn:
                cursor = conn.execute(statement, params)
                # Asked of the result's status: cursor.description builds a Column per column each time.
                result = cursor.pgresult
                return cursor.fetchall() if result is not None and result.status == ExecStatus.TUPLES_OK else []

        return self._retrying(run)

    def _fetchone(self, statement: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        rows = self._fetchall(statement, params)
        return rows[0] if rows else None

    def close(self) -> None:
        self._pool.close()

    # -- the dead-letter path, rates and retention ------------------------------------
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

    def prune(self, older_than_seconds: float, limit: int = PRUNE_BATCH) -> int:
        params = self._params(older_than=float(older_than_seconds), limit=limit)

        def run() -> int:
            with self._connection() as conn:
                return conn.execute(PRUNE_FINISHED, params).rowcount

        return self._retrying(run)

    def count_prunable(self, older_than_seconds: float) -> int:
        row = self._fetchone(COUNT_PRUNABLE, self._params(older_than=float(older_than_seconds)))
        return int(row["count"]) if row else 0

    def health_stats(self) -> DatabaseHealth:
        row = self._fetchone(HEALTH_STATS, {})
        if row is None:
            return DatabaseHealth(jobs_dead_tuples=None, oldest_transaction_age_seconds=None)
        dead = row["jobs_dead_tuples"]
        return DatabaseHealth(
            jobs_dead_tuples=int(dead) if dead is not None else None,
            oldest_transaction_age_seconds=float(row["oldest_transaction_age_seconds"]),
        )

    # -- wake-ups -------------------------------------------------------------------
    def listen(self, channels: Sequence[str]) -> Listener:
        return PostgresListener(self.database_url, channels)

    # -- workers ----------------------------------------------------------------------
    def register_worker(self, worker: WorkerInfo) -> None:
        self._fetchall(
            REGISTER_WORKER,
            self._params(
                id=worker.id,
                host=worker.host,
                pid=worker.pid,
                queues=json.dumps(list(worker.queues)),
                kinds=json.dumps(list(worker.kinds)),
                concurrency=worker.concurrency,
            ),
        )

    def touch_worker(self, worker_id: str) -> None:
        self._fetchall(TOUCH_WORKER, self._params(id=worker_id))

    def deregister_worker(self, worker_id: str) -> None:
        self._fetchall(DEREGISTER_WORKER, self._params(id=worker_id))

    def list_workers(self, seen_within_seconds: float | None = None) -> list[WorkerInfo]:
        rows = self._fetchall(LIST_WORKERS, self._params(within=seen_within_seconds))
        return [worker_info(row, _READ) for row in rows]

    # -- API tokens -------------------------------------------------------------------
    def create_token(self, tenant: str, token_hash: str, name: str | None = None, admin: bool = False) -> ApiToken:
        tenant = token_tenant(tenant, token_hash, admin)
        row = self._fetchone(
            CREATE_TOKEN,
            self._params(id=new_job_id(), tenant=tenant, name=name, token_hash=token_hash, admin=admin),
        )
        assert row is not None  # INSERT … RETURNING always returns the row
        return api_token(row, _READ)

    def tenant_for_token(self, token_hash: str) -> str | None:
        row = self._fetchone(TENANT_FOR_TOKEN, self._params(token_hash=token_hash))
        return row["tenant"] if row else None

    def admin_token(self, token_hash: str) -> ApiToken | None:
        row = self._fetchone(ADMIN_TOKEN, self._params(token_hash=token_hash))
        return api_token(row, _READ) if row else None

    def revoke_token(self, token_id: uuid.UUID) -> ApiToken:
        row = self._fetchone(REVOKE_TOKEN, self._params(id=token_id))
        if row is None:
            raise TokenNotFound(token_id)
        return api_token(row, _READ)

    def list_tokens(self, tenant: str | None = None) -> list[ApiToken]:
        return [api_token(row, _READ) for row in self._fetchall(LIST_TOKENS, self._params(tenant=tenant))]

    # -- submitting -----------------------------------------------------------------
    def enqueue(self, job: NewJob, *, connection: object | None = None) -> JobStatus:
        return self.enqueue_many([job], connection=connection)[0]

    def enqueue_many(self, jobs: Sequence[NewJob], *, connection: object | None = None) -> list[JobStatus]:
        """With ``connection`` (the caller's psycopg connection, or a SQLAlchemy Connection or
        Session on psycopg: see :mod:`.caller`), the statements run in the caller's
        transaction and are neither committed nor retried here: the jobs exist, and the
        workers are woken, only when the caller commits."""
        if not jobs:
            return []
        caller = caller_connection(connection) if connection is not None else None
        validate_new_jobs(jobs)
        for job in jobs:
            storable_json(job.payload, "payload")
        ids = [new_job_id() for _ in jobs]
        batch = [
            {
                "id": str(job_id),
                "tenant": job.tenant,
                "queue": job.queue,
                "kind": job.kind,
                "payload": job.payload,
                "priority": job.priority,
                "max_attempts": job.max_attempts,
                "delay": job.delay_seconds,
                "run_after": job.run_after.isoformat() if job.run_after is not None else None,
                "total": job.total,
                "concurrency_key": job.concurrency_key,
                "idempotency_key": job.idempotency_key,
            }
            for job_id, job in zip(ids, jobs, strict=True)
        ]
        keyed = any(job.idempotency_key is not None for job in jobs)
        params = self._params(
            batch=dump_batch(batch, [job.payload for job in jobs], "payload"),
            keyed=keyed,
            wake_queues=",".join(sorted({j.queue for j in jobs})),
        )

        def fetch(statement: str, values: Mapping[str, Any]) -> list[dict[str, Any]]:
            if caller is None:
                return self._fetchall(statement, values)
            with translate_errors(), caller.cursor(row_factory=dict_row) as cursor:
                cursor.execute(statement, values)
                return cursor.fetchall()

        # One statement inserts and wakes the workers (autocommit, or at the caller's commit).
        # Only when an idempotency key was taken does a second one read the existing jobs
        # (committed by then: the insert waited for any transaction that held the key).
        row = fetch(ENQUEUE_JOBS, params)[0]  # an aggregate answers one row
        created_at = row["created_at"]
        later = dict(zip(row["later_ids"] or (), row["later_run_after"] or (), strict=True))
        inserted = set(row["ids"] or ()) if keyed else None
        existing: dict[tuple[str, str], JobStatus] = {}
        if row["inserted"] < len(jobs):
            taken = [j for j in jobs if j.idempotency_key is not None]
            rows = fetch(
                READ_BY_IDEMPOTENCY_KEYS,
                self._params(tenants=[j.tenant for j in taken], keys=[j.idempotency_key for j in taken]),
            )
            existing = {(r["tenant"], r["idempotency_key"]): _status(r) for r in rows}
        statuses = []
        for job_id, job in zip(ids, jobs, strict=True):
            if inserted is not None and job_id not in inserted:
                statuses.append(existing[(job.tenant, job.idempotency_key)])  # type: ignore[index]
            else:
                statuses.append(
                    queued_status(job, job_id, run_after=later.get(job_id, created_at), created_at=created_at)
                )
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
        request = ClaimRequest(worker, tuple(queues), limit, lease_seconds, tuple(kinds) if kinds is not None else None)
        statement, params = self._claim_statement(request)
        return self._claimed(request, self._fetchall(statement, params))

    def _claim_statement(self, request: ClaimRequest) -> tuple[str, dict[str, Any]]:
        check_claim(request.worker, request.limit, request.lease_seconds)
        return CLAIM_JOBS, self._params(
            worker=request.worker,
            queues=list(request.queues),
            limit=request.limit,
            visit=tenants_to_visit(request.limit),
            cursor=self._claim_cursor,
            lease_seconds=float(request.lease_seconds),
            kinds=list(request.kinds) if request.kinds is not None else None,
        )

    def _claimed(self, request: ClaimRequest, rows: list[dict[str, Any]]) -> list[ClaimedJob]:
        self._claim_cursor = advance_cursor(self._claim_cursor, (row["tenant"] for row in rows))
        return [claimed_job(row, request.worker, _READ) for row in rows]

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
        row = self._fetchone(
            RENEW_LEASE,
            self._params(
                **_fence(lease),
                lease_seconds=float(lease_seconds),
                done=done,
                total=total,
                checkpoint=None if checkpoint is None else dump_json(checkpoint, "checkpoint"),
                items=_item_batch([(lease, items)]),
            ),
        )
        if row is None:
            return Heartbeat(held=False, cancel_requested=False)
        return Heartbeat(held=True, cancel_requested=row["cancel_requested"])

    def complete(self, lease: Lease, result: JSON, done: int | None = None, total: int | None = None) -> None:
        if self.complete_many([Completion(lease, result, done, total)]):
            raise LeaseLost(lease.job_id, lease.attempt)

    def complete_many(self, finished: Sequence[Completion]) -> list[Lease]:
        if not finished:
            return []
        finished = sorted(finished, key=lambda item: item.lease.job_id)  # rows lock in id order
        rows = self._fetchall(COMPLETE_JOBS, self._complete_params(finished))
        return self._lost(finished, rows)

    def complete_and_claim(
        self, finished: Sequence[Completion], claim: ClaimRequest
    ) -> tuple[list[Lease], list[ClaimedJob]]:
        # COMPLETE_JOBS and the claim statement as they are, one after the other in one
        # transaction, pipelined: BEGIN, both statements and COMMIT leave in one send and
        # their answers come back together, so a steady worker pays one round trip and one
        # commit per batch of jobs, finished and refilled.
        finished = sorted(finished, key=lambda item: item.lease.job_id)
        complete_params = self._complete_params(finished) if finished else None
        claim_statement, claim_params = self._claim_statement(claim)

        def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            with self._connection() as conn:
                with conn.pipeline():
                    with conn.transaction():
                        done = conn.execute(COMPLETE_JOBS, complete_params) if complete_params else None
                        got = conn.execute(claim_statement, claim_params)
                return (done.fetchall() if done is not None else []), got.fetchall()

        completed, claimed = self._retrying(run)
        return self._lost(finished, completed), self._claimed(claim, claimed)

    def _complete_params(self, finished: Sequence[Completion]) -> dict[str, Any]:
        return self._params(
            batch=_completion_batch(finished), items=_item_batch([(item.lease, item.items) for item in finished])
        )

    def _lost(self, finished: Sequence[Completion], written_rows: list[dict[str, Any]]) -> list[Lease]:
        written = {row["id"] for row in written_rows}
        return [
            item.lease
            for item in finished
            if item.lease.job_id not in written and self._receipt(item.lease, AttemptOutcome.SUCCEEDED) is None
        ]

    def fail(self, lease: Lease, error: str, decision: Decision) -> FailResult:
        if not isinstance(error, str) or not error.strip():
            raise InvalidInput("error must be a non-empty string")
        error = storable_error(error)
        retry, delay = retry_params(decision)
        row = self._fetchone(
            FAIL_JOB,
            self._params(
                **_fence(lease),
                error=error,
                error_group=error_group(error),
                retry=retry,
                delay=delay,
            ),
        )
        if row is None:
            row = self._require_receipt(lease, AttemptOutcome.FAILED)
        return FailResult(
            state=JobState(row["state"]), run_after=row["run_after"] if row["state"] == "queued" else None
        )

    def release(self, lease: Lease) -> None:
        row = self._fetchone(RELEASE_JOB, self._params(**_fence(lease)))
        if row is None or row["released"] == 0:
            self._require_receipt(lease, AttemptOutcome.RELEASED, AttemptOutcome.CANCELLED)

    def acknowledge_cancel(self, lease: Lease) -> None:
        row = self._fetchone(ACKNOWLEDGE_CANCEL, self._params(**_fence(lease)))
        if row is None or row["stopped"] == 0:
            self._require_receipt(lease, AttemptOutcome.CANCELLED)

    def _receipt(self, lease: Lease, *outcomes: AttemptOutcome) -> dict[str, Any] | None:
        """The fenced write matched nothing: did it land earlier (a retried call)? Else the lease is lost."""
        row = self._fetchone(READ_ATTEMPT_RECEIPT, self._params(**_fence(lease)))
        return row if row is not None and row["outcome"] in outcomes else None

    def _require_receipt(self, lease: Lease, *outcomes: AttemptOutcome) -> dict[str, Any]:
        row = self._receipt(lease, *outcomes)
        if row is None:
            raise LeaseLost(lease.job_id, lease.attempt)
        return row

    def reap(self, delays: Sequence[float], limit: int = REAP_BATCH) -> ReapResult:
        rows = self._fetchall(
            REAP_EXPIRED,
            self._params(limit=limit, lease_expired=LEASE_EXPIRED_GROUP, delays=check_reap_delays(delays)),
        )
        counts = {row["state"]: row["jobs"] for row in rows}
        return ReapResult(
            requeued=counts.get("queued", 0),
            failed=counts.get("failed", 0),
            cancelled=counts.get("cancelled", 0),
        )

    # -- operators and the API ------------------------------------------------------
    def cancel(self, job_id: uuid.UUID, tenant: str | None = None) -> JobStatus:
        row = self._fetchone(CANCEL_JOB, self._params(job_id=job_id, tenant=tenant))
        if row is not None:
            return _status(row)
        current = self.get(job_id, tenant)
        raise InvalidTransition(f"job {job_id} is already {current.state.value}", current.state.value)

    def explain_facts(self, job_id: uuid.UUID, tenant: str | None = None, *, workers_seen_within: float) -> JobFacts:
        status = self.get(job_id, tenant)
        facts = self._fetchone(
            EXPLAIN_FACTS,
            self._params(
                job_id=job_id,
                queue=status.queue,
                tenant=status.tenant,
                priority=status.priority,
                run_after=status.run_after,
            ),
        )
        assert facts is not None  # one row, always
        usage = self.scope_usage(job_scopes(status.tenant, status.kind, status.queue, status.concurrency_key))

        def running_ids(scope: str) -> list[Any]:
            rows = self._fetchall(RUNNING_IN_SCOPE, self._params(tenant=tenant, scope=scope, limit=SHOWN_RUNNING_IDS))
            return [row["id"] for row in rows]

        return job_facts(status, facts, facts["now"], _READ, usage, running_ids, self.list_workers(workers_seen_within))

    # -- limits -----------------------------------------------------------------------
    def set_limit(self, limit: Limit) -> None:
        self._change_limit(
            SET_LIMIT,
            limit.scope,
            {
                "concurrency": limit.concurrency,
                "rate": limit.rate,
                "per_seconds": limit.per_seconds,
                "weight": limit.weight,
            },
        )

    def delete_limit(self, scope: str) -> None:
        if not self._change_limit(DELETE_LIMIT, check_scope(scope), {}):
            raise LimitNotFound(scope)

    def _change_limit(self, statement: str, scope: str, values: dict[str, Any]) -> bool:
        """Change a limit and the counters it governs in one transaction (LOCK_COUNTERS says why)."""
        params = self._params(scope=scope, **values)

        def run() -> bool:
            with self._connection() as conn, conn.transaction():
                conn.execute(LOCK_COUNTERS)
                changed = conn.execute(statement, params).rowcount > 0
                conn.execute(REFRESH_COUNTERS, params)
                return changed

        return self._retrying(run)

    def list_limits(self, tenant: str | None = None) -> list[Limit]:
        return [limit_row(row) for row in self._fetchall(LIST_LIMITS, self._params(tenant=tenant))]

    def scope_usage(self, scopes: Sequence[str] | None = None) -> list[ScopeUsage]:
        rows = self._fetchall(SCOPE_USAGE, self._params(scopes=list(scopes) if scopes is not None else None))
        return [scope_usage_row(row, _READ) for row in rows]

    def replay(self, which: ReplayFilter, by: str, dry_run: bool = False) -> list[uuid.UUID]:
        params = self._params(**_replay_params(which), by=by)

        def run() -> list[uuid.UUID]:
            with self._connection() as conn:
                with conn.transaction(force_rollback=dry_run):
                    return [row["id"] for row in conn.execute(REPLAY_JOBS, params).fetchall()]

        return self._retrying(run)

    def get(self, job_id: uuid.UUID, tenant: str | None = None, token_hash: str | None = None) -> JobStatus:
        if token_hash is not None:
            found = self._fetchone(GET_JOB_FOR_TOKEN, self._params(job_id=job_id, token_hash=token_hash))
            if found is None:
                raise Unauthorized("unknown or revoked token")
            if found["id"] is None:
                raise JobNotFound(job_id)
            return _status(found)
        row = self._fetchone(GET_JOB, self._params(job_id=job_id, tenant=tenant))
        if row is None:
            raise JobNotFound(job_id)
        return _status(row)

    def read_statuses(self, reads: Sequence[StatusRead]) -> list[JobStatus | None]:
        if not reads:
            return []
        rows = self._fetchall(
            READ_STATUSES,
            self._params(
                ids=[r.job_id for r in reads],
                tenants=[r.tenant for r in reads],
                token_hashes=[r.token_hash for r in reads],
            ),
        )
        found: list[JobStatus | None] = [None] * len(reads)
        for row in rows:
            found[row["ord"] - 1] = _status(row)
        return found

    def list_items(self, query: ItemQuery) -> ItemPage:
        check_page_size(query.limit)
        rows = self._fetchall(
            LIST_FAILED_ITEMS if query.state is ItemState.FAILED else LIST_ITEMS,
            self._params(
                job_id=query.job_id,
                tenant=query.tenant,
                state=query.state.value if query.state else None,
                after_index=-1 if query.after_index is None else query.after_index,
                limit=query.limit + 1,
            ),
        )
        if not rows:
            raise JobNotFound(query.job_id)
        return item_page([row for row in rows if row["item_index"] is not None], query.limit, _READ)

    def get_result(self, job_id: uuid.UUID, tenant: str | None = None) -> JSON:
        row = self._fetchone(GET_RESULT, self._params(job_id=job_id, tenant=tenant))
        if row is None:
            raise JobNotFound(job_id)
        if row["state"] != JobState.SUCCEEDED:
            raise InvalidTransition(f"job {job_id} has no result: it is {row['state']}", row["state"])
        return row["body"]

    def get_payload(self, job_id: uuid.UUID, tenant: str | None = None) -> JSON:
        row = self._fetchone(GET_PAYLOAD, self._params(job_id=job_id, tenant=tenant))
        if row is None:
            raise JobNotFound(job_id)
        return row["payload"]

    def list_jobs(self, query: JobQuery) -> JobPage:
        check_page_size(query.limit)
        rows = self._fetchall(
            LIST_ALL_JOBS if query.tenant is None else LIST_JOBS,
            self._params(
                tenant=query.tenant,
                state=query.state.value if query.state else None,
                kind=query.kind,
                queue=query.queue,
                created_after=query.created_after,
                after_id=query.after_id,
                limit=query.limit + 1,
            ),
        )
        items = [_status(row) for row in rows[: query.limit]]
        more = len(rows) > query.limit
        return JobPage(items=items, next_after_id=items[-1].id if more else None)

    def job_attempts(self, job_id: uuid.UUID) -> list[Attempt]:
        return [attempt(row, _READ) for row in self._fetchall(JOB_ATTEMPTS, self._params(job_id=job_id))]

    def running_jobs(self, limit: int = RUNNING_JOBS_LIMIT) -> list[JobStatus]:
        return [_status(row) for row in self._fetchall(RUNNING_JOBS, self._params(limit=limit))]


def _item_batch(outcomes: Sequence[tuple[Lease, Sequence[ItemOutcome]]]) -> str:
    """The item outcomes of one statement as one JSON parameter (see ITEM_INPUT); each
    result is JSON text inside it, read back as jsonb."""
    return json.dumps([row for lease, items in outcomes for row in item_rows(lease, items)])


def _completion_batch(finished: Sequence[Completion]) -> str:
    """COMPLETE_JOBS's batch parameter: one JSON document, in the (id) order given."""
    for item in finished:
        check_progress(item.done, item.total)
    return json.dumps(
        [
            {
                "job_id": str(item.lease.job_id),
                "claim": item.lease.claim,
                "attempt": item.lease.attempt,
                "owner": item.lease.owner,
                "result_id": str(new_job_id()),
                "body": dump_json(item.result, "result"),  # JSON text in a JSON string: a null result stays JSON null
                "done": item.done,
                "total": item.total,
            }
            for item in finished
        ]
    )


def _fence(lease: Lease) -> dict[str, Any]:
    return {"job_id": lease.job_id, "claim": lease.claim, "attempt": lease.attempt, "owner": lease.owner}


def _replay_params(which: ReplayFilter) -> dict[str, Any]:
    return {
        "states": replayable_states(which),
        "failed_items": which.failed_items,
        "tenant": which.tenant,
        "ids": list(which.ids),
        "kind": which.kind,
        "error_like": substring_pattern(which.error_like),
        "error_group": which.error_group,
        "since": which.since,
    }


# psycopg returns times, ids, arrays and JSON typed already.
_READ = Readers(time=lambda value: value, ident=lambda value: value, names=tuple, json=lambda value: value)


def _status(row: Mapping[str, Any]) -> JobStatus:
    return job_status(row, _READ)
