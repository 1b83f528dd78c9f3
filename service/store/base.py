"""The Store protocol: every operation the queue needs, typed.

Two implementations, :mod:`service.store.postgres` and :mod:`service.store.sqlite`,
pass the same conformance suite (``tests/store``). Everything above the store
(worker, API, CLI) talks to this protocol and never writes SQL.

Time: every lease and due-time decision is computed by the database clock.
A store built with a ``clock`` (tests only) passes that instant to the same
statements in place of ``now()``, so tests pin time instead of sleeping.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Protocol

from service.explain import JobFacts
from service.jobs import (
    JSON,
    ActiveCount,
    ApiToken,
    Attempt,
    AuditEntry,
    ClaimedJob,
    ClaimRequest,
    Completion,
    FailResult,
    FailureGroup,
    Heartbeat,
    ItemOutcome,
    ItemPage,
    ItemQuery,
    JobCount,
    JobPage,
    JobQuery,
    JobStatus,
    KindOutcomes,
    Lease,
    NewJob,
    Notification,
    OutcomeBucket,
    QueueStats,
    ReapResult,
    Replay,
    ReplayFilter,
    StatusRead,
    Throughput,
    WorkerInfo,
)
from service.limits import Limit, ScopeUsage
from service.retry import Decision
from service.schedules import Schedule, ScheduleSpec
from service.workflows import Dependencies, ParentResult, WorkflowProgress

Clock = Callable[[], datetime]

REAP_BATCH = 500
"""Rows one reap statement touches at most, so it never holds many locks at once."""

RUNNING_JOBS_LIMIT = 1_000
"""Running jobs one console page lists at most (a fleet's slots; more is a fleet no page shows)."""

PRUNE_BATCH = 1_000
"""Jobs one prune statement deletes at most: short transactions, short locks."""

ROLLUP_BATCH = 10_000
"""Finished jobs one fold of the daily rollup reads at most: a short statement, and a
worker's maintenance thread never busy with it for long."""

COMPLETE_BATCH = 500
"""Results one ``complete_many`` call should carry at most (the worker's finisher batches
by it): the rows one statement locks and writes at once."""

STATUS_READ_BATCH = 200
"""Status polls one ``read_statuses`` call should carry at most (the API coalesces polls
into it). Smaller than COMPLETE_BATCH because a batched poll waits for the whole read:
it bounds one answer's wait, and one statement's parameters."""

JOBS_QUEUED = "jobq_jobs"
"""Channel: jobs were enqueued (payload: the comma-separated queues). Wakes idle workers."""

JOB_CHANGED = "jobq_job_changes"
"""Channel: a job's state or progress changed (payload: the job id). Answers long polls."""


MAINTENANCE = "maintenance"
"""The leadership whose holder runs the fleet's maintenance (service.maintenance.leadership)."""


@dataclass(frozen=True)
class LeaderLease:
    """A leadership's lease as its holder got it: the fencing token is (name, owner, term).

    ``term`` grows by one at every takeover; a write made with this token (the maintenance
    operations' ``leader=``) changes nothing unless ``owner`` still holds ``name`` in
    ``term``, unexpired, when the write commits (LeadershipLost otherwise)."""

    name: str
    owner: str
    term: int
    acquired_at: datetime  # when this term began (the database clock)
    expires_at: datetime  # the database clock; renewals move it on


@dataclass(frozen=True)
class CheckIn:
    """A worker's periodic word with the store (:meth:`Store.check_in`), one statement: it was
    marked alive, took or renewed the leadership or learnt when its holder's lease ends, and
    learnt what it paces itself by (service.maintenance.presence)."""

    lease: LeaderLease | None  # the leadership, when this worker holds it now
    free_in: float  # otherwise: seconds until the holder's lease ends (0: free now, or nothing read)
    peers: int  # live workers sharing a queue with this one that have a slot free, itself counted (>= 1)
    next_schedule_in: float | None  # seconds until the earliest unpaused schedule is due (<= 0: due); None: none
    jobs_running: bool = True  # some job of the fleet runs (False: the leader's reaper may rest)


@dataclass(frozen=True)
class OpenTransaction:
    """Who holds the oldest open transaction on jobq's database: what to end when it holds back vacuum."""

    pid: int | None  # its backend (pg_terminate_backend); None for a prepared transaction, which has none
    usename: str | None  # the role it runs as (a prepared transaction's owner)
    application_name: str | None  # what the client called itself ('' when it did not say)
    state: str | None  # 'active', 'idle in transaction', ... or 'prepared'
    xmin_age: int | None  # xids since the oldest it holds back: its snapshot's xmin or its own xid (None: neither)


@dataclass(frozen=True)
class DatabaseHealth:
    """What FAILURE-MODES.md asks metrics to show about the database itself (None: not measured here)."""

    jobs_dead_tuples: int | None  # dead row versions in jobs, not yet vacuumed (bloat building up)
    oldest_transaction_age_seconds: float | None  # the oldest open transaction on this database, 0 if none
    oldest_transaction: OpenTransaction | None = None  # who holds it (None: none open, or not measured)
    replication_xmin_age: int | None = None  # xids a replication slot or standby's feedback holds back, 0 if none


class Listener(Protocol):
    """Wake-ups from the store: LISTEN/NOTIFY on PostgreSQL, nothing on SQLite.

    A wake-up is only a hint. Callers poll too, because notifications are lost
    while a connection is down (a reconnect answers with ``payload == "*"``).
    """

    def wait(self, timeout: float) -> list[Notification]:
        """Block until a notification arrives or ``timeout`` seconds pass ([] then)."""
        ...

    def close(self) -> None:
        """Stop listening; a ``wait`` in another thread returns within a fraction of a second."""
        ...


@dataclass(frozen=True)
class StoredResult:
    """A succeeded job's result as a streaming reader finds it: its row and its size in bytes."""

    result_id: uuid.UUID
    size: int


class Store(Protocol):
    max_result_bytes: int
    """The largest result (a job's or an item's JSON text) a completion may write (ResultTooLarge over it)."""
    max_payload_bytes: int
    """The largest payload (compact JSON text) an enqueue or a schedule may write (PayloadTooLarge
    over it): JOBQ_MAX_BODY_BYTES, checked here for every producer (service.payloads.dump_payloads)."""

    # -- submitting ---------------------------------------------------------------
    def enqueue(self, job: NewJob, *, connection: object | None = None, token_hash: str | None = None) -> JobStatus:
        """Store one job. With an idempotency key already used by the tenant, return that job if
        it is this very request (:func:`service.jobs.require_same_job`), else raise
        IdempotencyConflict: the rule of every producer, applied here (``checks.keyed_job``) on
        the enqueue's own transaction, so a job inserted earlier in the caller's transaction
        counts too. A key whose job was pruned is free again: a new job is stored (also when the
        pruner deletes it between the insert and the read-back, on PostgreSQL).

        ``connection``: the caller's open PostgreSQL connection (psycopg, or a SQLAlchemy
        Connection/Session on psycopg); the job is inserted in the caller's transaction and
        exists only if the caller commits. SQLite refuses it (InvalidInput).

        ``token_hash`` (the API's submit): the job is stored for the tenant of the live tenant
        token with this hash instead of ``job.tenant``, the token looked up in the same statement
        (SQLite: the same transaction), so a revoked token is refused from its revocation's
        commit on. Unauthorized, with nothing written, for an unknown, revoked or admin token.
        """
        ...

    def enqueue_many(
        self, jobs: Sequence[NewJob], *, connection: object | None = None, token_hash: str | None = None
    ) -> list[JobStatus]:
        """Store many jobs, all or none; the answer is in the order given. One round trip without
        idempotency keys; with them, the keys taken are read back in the same transaction, and
        one IdempotencyConflict writes none of the jobs. ``connection`` and ``token_hash`` as for
        ``enqueue``."""
        ...

    async def enqueue_many_async(self, jobs: Sequence[NewJob], *, connection: object) -> list[JobStatus]:
        """``enqueue_many`` inside the caller's transaction on its async connection (AsyncQueue):
        psycopg's AsyncConnection, or SQLAlchemy's AsyncConnection/AsyncSession on psycopg. The
        same statements, awaited on the caller's event loop; nothing committed here. SQLite
        refuses it (InvalidInput), as it refuses ``connection=``."""
        ...

    # -- workflows (service.workflows) ------------------------------------------------
    def parent_results(self, job_id: uuid.UUID) -> list[ParentResult]:
        """A job's parents with their states and results (None unless succeeded), oldest
        first, in one query: what ``ctx.parent_results()`` hands a child's handler."""
        ...

    def dependencies(
        self,
        job_id: uuid.UUID,
        tenant: str | None = None,
        *,
        limit: int = 100,
        parents_after: uuid.UUID | None = None,
        children_after: uuid.UUID | None = None,
    ) -> Dependencies:
        """A page of a job's parents and of its children with their states, each in id order.
        Scoped by ``tenant`` like every job read. Raises JobNotFound."""
        ...

    def workflow_progress(self, workflow_id: uuid.UUID, tenant: str | None = None) -> WorkflowProgress:
        """A workflow's jobs (``JobStatus.workflow_id``) counted by state, in one query through
        its index. Scoped by ``tenant``: another tenant's workflow counts nothing."""
        ...

    # -- the worker's hot path (each write fenced by the lease) -------------------
    def claim(
        self,
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        kinds: Sequence[str] | None = None,
        max_attempts: Mapping[str, int] | None = None,
    ) -> list[ClaimedJob]:
        """Take up to ``limit`` due jobs: running, attempts + 1, a lease from the database clock.

        ``max_attempts``: per kind, its handler's max_attempts (ClaimRequest.max_attempts):
        written into each claimed job as its default, or as a ceiling on its own."""
        ...

    def has_claimable(self, queues: Sequence[str], kinds: Sequence[str] | None = None) -> bool:
        """Whether a job of these queues (and kinds) is due now: an idle worker's poll before it
        claims. One read of the claim's index, no lock, no write. True does not promise that a
        claim takes a job (a limit may hold it back, another worker may take it first)."""
        ...

    def complete_and_claim(
        self, finished: Sequence[Completion], claim: ClaimRequest
    ) -> tuple[list[Lease], list[ClaimedJob]]:
        """``complete_many(finished)`` and then ``claim`` with the request, in one transaction
        (PostgreSQL: pipelined, one round trip): a worker refills the slots its finished jobs
        free with the same write. Returns the lost leases and the jobs claimed."""
        ...

    def heartbeat(
        self,
        lease: Lease,
        lease_seconds: float,
        done: int | None = None,
        total: int | None = None,
        checkpoint: JSON | None = None,
        items: Sequence[ItemOutcome] = (),
    ) -> Heartbeat:
        """Extend the lease and record progress in one statement, with the item outcomes
        recorded since the last heartbeat (PostgreSQL: the same statement; SQLite: the same
        transaction), fenced with it: a lost lease writes none of them. An item given again
        replaces its earlier outcome (a failed item re-run); the job's counts follow."""
        ...

    def complete(self, lease: Lease, result: JSON, done: int | None = None, total: int | None = None) -> None:
        """Store the result and mark the job succeeded, with the handler's final progress if given
        (a succeeded job with a total is fully done). Raises LeaseLost, changing nothing."""
        ...

    def list_items(self, query: ItemQuery) -> ItemPage:
        """A job's item outcomes so far, in item order, keyset-paginated; readable while it runs.
        Scoped by ``query.tenant`` like every job read. Raises JobNotFound."""
        ...

    def complete_many(self, finished: Sequence[Completion]) -> list[Lease]:
        """Complete many jobs in one round trip, each with its item outcomes not yet written;
        returns the leases that were lost (nothing written for them)."""
        ...

    def fail(self, lease: Lease, error: str, decision: Decision) -> FailResult:
        """Persist a failed attempt as decided (service.retry): queued again after the
        decision's delay, or failed; cancelled if its cancellation was requested. Raises LeaseLost."""
        ...

    def release(self, lease: Lease) -> None:
        """Hand the job back to the queue at once, without charging the attempt. Raises LeaseLost."""
        ...

    def acknowledge_cancel(self, lease: Lease) -> None:
        """The worker stopped a job whose cancellation was requested: mark it cancelled."""
        ...

    def reap(
        self, delays: Sequence[float], limit: int = REAP_BATCH, *, leader: LeaderLease | None = None
    ) -> ReapResult:
        """Requeue (or fail) running jobs whose lease expired. Safe on every worker at once.

        ``leader``: the maintenance leader's token; the reap changes nothing and raises
        LeadershipLost unless it still holds (the same for every maintenance write below).

        ``delays`` is the retry decision for an expired lease, made before the store
        knows which jobs expired (``RetryPolicy.delays_by_attempt``): a job whose
        attempt ``a`` expired, with attempts left, is due ``delays[a - 1]`` seconds later.
        """
        ...

    # -- operators and the API ----------------------------------------------------
    def cancel(self, job_id: uuid.UUID, tenant: str | None = None) -> JobStatus:
        """Cancel a queued job now; ask a running job to stop. Raises InvalidTransition if terminal."""
        ...

    def make_due(self, job_id: uuid.UUID) -> JobStatus:
        """ "Run now": a queued job waiting for its delay or backoff is due at once (any tenant's,
        an operator's command). Raises InvalidTransition when it runs, has ended or is due
        already; JobNotFound."""
        ...

    def replay(self, which: ReplayFilter, by: str, dry_run: bool = False) -> list[uuid.UUID]:
        """Put failed (and optionally cancelled) jobs back in the queue with attempts 0, recorded.
        With ``which.failed_items``: jobs with failed items (succeeded ones too), whose failed
        outcomes are removed so that the next attempt runs only those items."""
        ...

    def get(self, job_id: uuid.UUID, tenant: str | None = None, token_hash: str | None = None) -> JobStatus:
        """A job's status; never reads the payload or the result body. Raises JobNotFound.

        With ``token_hash`` (the API's status poll) the read is scoped to that token's
        tenant, looked up in the same query; raises Unauthorized for an unknown or revoked token.
        """
        ...

    def read_statuses(self, reads: Sequence[StatusRead]) -> list[JobStatus | None]:
        """Many status polls in one read, answered in order: the job's status, or None when
        the job is missing, another tenant's, or the token unknown or revoked (the caller
        that needs to say which asks ``get``). The API coalesces concurrent polls into this.
        """
        ...

    def get_result(self, job_id: uuid.UUID, tenant: str | None = None) -> JSON:
        """A succeeded job's result. Raises JobNotFound, or InvalidTransition before success."""
        ...

    def result_size(self, job_id: uuid.UUID, tenant: str | None = None) -> StoredResult:
        """Where a succeeded job's result is and its size in bytes of JSON text, for a reader that
        streams it with :meth:`read_result_chunk`. Raises JobNotFound, or InvalidTransition before success."""
        ...

    def read_result_chunk(self, result_id: uuid.UUID, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)`` of a result's JSON text (UTF-8); fewer at its end,
        none once it is gone (pruned meanwhile). A reader's memory is a chunk, whatever the size."""
        ...

    def get_payload(self, job_id: uuid.UUID, tenant: str | None = None) -> JSON:
        """A job's payload as stored (the API compares it on a repeated Idempotency-Key). Raises JobNotFound."""
        ...

    def list_jobs(self, query: JobQuery) -> JobPage:
        """One tenant's jobs (every tenant's when ``query.tenant`` is None), newest first, keyset-paginated."""
        ...

    def count_jobs(self, query: JobQuery, budget: int) -> JobCount:
        """How many jobs ``query``'s filters match (its cursors ignored), reading at most
        ``budget`` jobs of the index its listing walks, newest first: exact when the walk ends
        within it, else a lower bound. An exact count of a filter no index serves (a kind, a
        time range) would read the whole history; this costs what ``budget / limit`` pages do."""
        ...

    def job_attempts(self, job_id: uuid.UUID) -> list[Attempt]:
        """A job's attempts, oldest first (empty for a job never claimed or not there)."""
        ...

    def running_jobs(self, limit: int = RUNNING_JOBS_LIMIT) -> list[JobStatus]:
        """Running jobs, every tenant's, by lease owner: what each worker runs now. Active rows only."""
        ...

    def explain_facts(self, job_id: uuid.UUID, tenant: str | None = None, *, workers_seen_within: float) -> JobFacts:
        """What ``service.explain.explain`` words about one job, read now in a few queries:
        the status, the last attempt, the job's scope counters (and, for a full scope, the
        running jobs in it that ``tenant`` may see), the workers seen within the window,
        and the due jobs of its tenant ahead of it. Raises JobNotFound."""
        ...

    # -- limits and fair shares (service.limits) -------------------------------------
    def set_limit(self, limit: Limit) -> None:
        """Set the scope's limit, replacing what was set on it; in force from the next claim.
        The scope's counters are recounted from the running jobs in the same transaction."""
        ...

    def delete_limit(self, scope: str) -> None:
        """Remove the scope's limit (its counters go with it). Raises LimitNotFound."""
        ...

    def list_limits(self, tenant: str | None = None) -> list[Limit]:
        """Every limit set, by scope; with ``tenant``, only tenant:TENANT and tenant:*."""
        ...

    def scope_usage(self, scopes: Sequence[str] | None = None) -> list[ScopeUsage]:
        """The counters of limited scopes (all, or those named): the limit in force and the
        jobs running in each, exact."""
        ...

    # -- the dead-letter path, rates and retention (indexed time windows only) ---
    def failure_groups(self, since: datetime, kind: str | None = None, tenant: str | None = None) -> list[FailureGroup]:
        """Failed jobs since a moment, grouped by kind and error group, biggest first. One query."""
        ...

    def outcomes(self, window_seconds: float, kind: str | None = None) -> list[KindOutcomes]:
        """Jobs per kind that succeeded or failed within the last ``window_seconds``."""
        ...

    def lease_expiries(self, window_seconds: float) -> int:
        """Attempts ended by lease expiry (reclaimed jobs) within the window."""
        ...

    def duration_buckets(self, window_seconds: float, bounds: Sequence[float]) -> dict[str, list[int]]:
        """Run time of the final attempt of jobs finished in the window, per kind.

        ``len(bounds) + 1`` counts per kind: index i counts values in
        ``[bounds[i-1], bounds[i])``, index 0 those below ``bounds[0]``.
        """
        ...

    def pickup_buckets(self, window_seconds: float, bounds: Sequence[float]) -> dict[str, list[int]]:
        """Time from due to claimed of attempts that ended in the window, per kind; buckets as above."""
        ...

    def throughput(self, window_seconds: float, buckets: int) -> list[Throughput]:
        """Jobs that succeeded or failed per queue within the last ``window_seconds``, cut into
        ``buckets`` equal time buckets (0 the oldest); buckets with no job are left out."""
        ...

    def queue_stats(self) -> list[QueueStats]:
        """Per queue: queued, running, and the age of the oldest due job. Reads active rows only."""
        ...

    def active_counts(self) -> list[ActiveCount]:
        """Queued and running jobs per queue and kind."""
        ...

    def prune(self, older_than_seconds: float, limit: int = PRUNE_BATCH, *, leader: LeaderLease | None = None) -> int:
        """Delete up to ``limit`` terminal jobs finished longer ago than that, with their
        attempts, results and replays. Never touches queued or running jobs."""
        ...

    def prune_rollup(self, older_than_seconds: float, *, leader: LeaderLease | None = None) -> int:
        """Delete the daily rollup's UTC days (counts and histograms) that ended longer ago
        than that; how many rows went. The rollup is kept apart from the jobs' retention:
        a year of days costs what a few days of jobs do."""
        ...

    def count_prunable(self, older_than_seconds: float) -> int: ...

    def fold_rollup(
        self,
        bounds: Sequence[float],
        bucket_seconds: Sequence[float],
        settle_seconds: float,
        limit: int = ROLLUP_BATCH,
        *,
        leader: LeaderLease | None = None,
    ) -> int:
        """Fold up to ``limit`` jobs that finished past the rollup's watermark (and more than
        ``settle_seconds`` ago) into the daily rollup and move the watermark, in one
        transaction; 0 when another process holds the watermark. Histogram buckets are
        ``width_bucket(seconds, bounds)``, each stored with its ``bucket_seconds``.
        See :mod:`service.maintenance.rollup`."""
        ...

    def health_stats(self) -> DatabaseHealth:
        """Dead tuples of the jobs table, the oldest open transaction's age and who holds it, and
        the xmin replication holds back (PostgreSQL; None on SQLite). Reads the statistics views
        only, never a table."""
        ...

    # -- periodic schedules (service.schedules) ----------------------------------------
    def database_now(self) -> datetime:
        """The database's clock (the pinned clock of a store built with one)."""
        ...

    def save_schedule(self, spec: ScheduleSpec, next_run_at: datetime) -> Schedule:
        """Add the schedule, or redefine the one of that name: a redefinition keeps paused, the
        last run, and next_run_at unless the cron expression or the time zone changed."""
        ...

    def list_schedules(self) -> list[Schedule]:
        """Every schedule, by name."""
        ...

    def due_schedules(self, limit: int = 100) -> tuple[datetime, list[Schedule], datetime | None]:
        """The database clock now, the unpaused schedules due by then (earliest first), and the
        earliest next run of the unpaused schedules not yet due (None: none), when to look again."""
        ...

    def advance_schedule(
        self,
        name: str,
        expected: datetime,
        next_run_at: datetime,
        tick: datetime | None = None,
        job_id: uuid.UUID | None = None,
        *,
        leader: LeaderLease | None = None,
    ) -> bool:
        """Move an unpaused schedule on to ``next_run_at`` if it is still due at ``expected``
        (compare-and-set: False when another pass moved it first), recording the tick fired.
        ``leader``: as for ``reap`` (LeadershipLost, the schedule unmoved)."""
        ...

    def set_schedule_paused(self, name: str, paused: bool, next_run_at: datetime | None = None) -> Schedule:
        """Pause or resume; ``next_run_at`` replaces the next run if given. Raises ScheduleNotFound."""
        ...

    def delete_schedule(self, name: str) -> None:
        """Remove the schedule (its jobs stay). Raises ScheduleNotFound."""
        ...

    # -- leadership (service.maintenance.leadership) -----------------------------------
    def acquire_leadership(self, name: str, owner: str, lease_seconds: float) -> tuple[LeaderLease | None, float]:
        """Take the leadership if it is free (never held, expired or resigned), with term + 1,
        or renew it if ``owner`` holds it unexpired: (the lease, 0). While another holds it:
        (None, the seconds until that lease ends), when a candidate should ask again. One
        statement, the database clock: the lease lasts ``lease_seconds`` from now."""
        ...

    def check_in(self, worker_id: str, name: str, lease_seconds: float, alive_seconds: float) -> CheckIn:
        """A worker's periodic statement: mark it alive (as ``touch_worker``), take or renew the
        leadership ``name`` for it or learn when its holder's lease ends (as
        ``acquire_leadership``, owner ``worker_id``), count its peers (workers seen within
        ``alive_seconds`` sharing one of its queues, with a slot free: running fewer jobs than
        their concurrency), and read when the next schedule is due and whether any job runs.
        One transaction, so an idle
        worker's upkeep is one statement per interval."""
        ...

    def resign_leadership(self, lease: LeaderLease) -> bool:
        """End the lease now if it still holds (a graceful shutdown): another worker may take
        over at once. False when it had already been lost."""
        ...

    def current_leader(self, name: str = MAINTENANCE) -> LeaderLease | None:
        """The leadership's holder now (None when no lease is unexpired)."""
        ...

    # -- wake-ups -------------------------------------------------------------------
    def listen(self, channels: Sequence[str]) -> Listener:
        """A listener on its own connection (not from the pool), for one thread to wait on."""
        ...

    # -- workers ----------------------------------------------------------------------
    def register_worker(self, worker: WorkerInfo) -> None:
        """Record a worker process (started and last seen now, by the database clock)."""
        ...

    def touch_worker(self, worker_id: str) -> None:
        """Mark the worker alive now; re-registers nothing if the row was removed."""
        ...

    def deregister_worker(self, worker_id: str) -> None:
        """Remove a worker that stopped cleanly."""
        ...

    def list_workers(self, seen_within_seconds: float | None = None) -> list[WorkerInfo]:
        """Workers, newest first; only those seen within the window when one is given."""
        ...

    # -- API tokens (hashed by the caller; the store never sees a token) ------------
    def create_token(
        self, tenant: str, token_hash: str, name: str | None = None, admin: bool = False, read_only: bool = False
    ) -> ApiToken:
        """Store a token's hash; ``admin``: an operator's token (tenant ``ADMIN_TENANT``)."""
        ...

    def tenant_for_token(self, token_hash: str) -> str | None:
        """The tenant of a live tenant token, or None for an unknown, revoked or admin one."""
        ...

    def admin_token(self, token_hash: str) -> ApiToken | None:
        """A live admin token with this hash, or None (unknown, revoked, or a tenant's)."""
        ...

    def revoke_token(self, token_id: uuid.UUID) -> ApiToken:
        """Revoke a token from now on. Raises TokenNotFound."""
        ...

    def list_tokens(self, tenant: str | None = None) -> list[ApiToken]: ...

    # -- the console's own reads ----------------------------------------------------------

    def job_ids_in_range(self, low: uuid.UUID, high: uuid.UUID, limit: int = 2) -> list[uuid.UUID]:
        """Job ids from ``low`` to ``high`` (both included), lowest first, at most ``limit``:
        the jobs whose id starts with a prefix (service.jobs.id_prefix_range), any tenant's."""
        ...

    def job_replays(self, job_id: uuid.UUID) -> list[Replay]:
        """A job's replays (job_replays), oldest first; none for an unknown job."""
        ...

    def recent_outcomes(self, by: str, window_seconds: float, buckets: int) -> list[OutcomeBucket]:
        """Jobs that succeeded or failed within the last ``window_seconds``, per queue or kind
        (``by``) and one of ``buckets`` equal time buckets (0 the oldest; empty ones left out),
        with their run and first-attempt wait summed. Reads the window of finished jobs."""
        ...

    def daily_outcomes(self, by: str, first_day: date) -> list[OutcomeBucket]:
        """The same from the daily rollup, per queue or kind and UTC day from ``first_day``
        (bucket n: first_day + n days); the wait from its histogram's bucket middles. Only
        what the rollup has folded (jobs settled a minute and folded by the leader)."""
        ...

    def start_console_session(
        self, session_hash: str, token_id: uuid.UUID, lifetime_seconds: float, idle_seconds: float
    ) -> None:
        """A console login: a session (by its id's hash) of the admin token ``token_id``, ending
        ``lifetime_seconds`` from now at the latest; sessions that ended are deleted first."""
        ...

    def console_session(self, session_hash: str, idle_seconds: float, touch_after_seconds: float) -> ApiToken | None:
        """The admin token of a live session: not ended, not idle ``idle_seconds``, its token not
        revoked; None otherwise. Restarts the idle time when it was last used over
        ``touch_after_seconds`` ago (most requests only read)."""
        ...

    def end_console_session(self, session_hash: str) -> None:
        """Logout: the session ends, whoever holds a copy of its cookie."""
        ...

    def record_action(self, actor: str, action: str, target: str, detail: str, jobs: int) -> None:
        """The audit trail: a change made from the console (after it was made)."""
        ...

    def list_actions(self, limit: int, before_id: int | None = None, target: str | None = None) -> list[AuditEntry]:
        """The audit trail, newest first, ids below ``before_id``; one target's only when given."""
        ...

    def close(self) -> None: ...
