"""Domain types of the queue: states, jobs, leases. No I/O here."""

from __future__ import annotations

import enum
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from service.errors import IdempotencyConflict, InvalidInput

JSON = Any
"""A value that round-trips through JSON."""


class JobState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class AttemptOutcome(enum.StrEnum):
    """How one attempt ended, as kept in ``job_attempts``."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the handler raised; the job was retried or failed
    LEASE_EXPIRED = "lease_expired"  # the worker stopped heartbeating (crash, kill, partition)
    RELEASED = "released"  # handed back at shutdown; the attempt is not charged
    CANCELLED = "cancelled"


class _TimeOrderedIds:
    """UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then randomness, monotonic per process.

    Time-ordered ids keep new rows together at the right edge of the primary key
    index, and ordering by id is ordering by creation time (list newest first;
    FIFO within one batch). Within one millisecond the next id is the last plus one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def next(self) -> uuid.UUID:
        value = _uuid7(time.time_ns() // 1_000_000, int.from_bytes(os.urandom(10), "big"))
        with self._lock:
            if value <= self._last:
                value = self._last + 1
            self._last = value
        return uuid.UUID(int=value)

    def take(self, count: int) -> list[uuid.UUID]:
        """``count`` ids, increasing: a batch's, in its order. They share one clock reading
        (a batch is made within a millisecond or so) and one read of randomness, sorted."""
        millis = time.time_ns() // 1_000_000
        rand = os.urandom(10 * count)
        values = sorted(_uuid7(millis, int.from_bytes(rand[at : at + 10], "big")) for at in range(0, 10 * count, 10))
        with self._lock:
            last = self._last
            for i, value in enumerate(values):
                last = values[i] = value if value > last else last + 1
            self._last = last
        return [uuid.UUID(int=value) for value in values]


def _uuid7(millis: int, random: int) -> int:
    """A UUIDv7 as an integer, from the time in milliseconds and 80 random bits."""
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version 7
    value |= ((random >> 62) & 0xFFF) << 64  # 12 bits rand_a
    value |= 0b10 << 62  # RFC 9562 variant
    value |= random & ((1 << 62) - 1)  # 62 bits rand_b
    return value


_ids = _TimeOrderedIds()
new_job_id = _ids.next
new_job_ids = _ids.take


DEFAULT_MAX_ATTEMPTS = 3
"""A job's attempts when neither the enqueue nor the kind's handler says."""


@dataclass(frozen=True)
class NewJob:
    """A job to enqueue. Validated by :func:`service.payloads.validate_new_job` in the store."""

    kind: str
    payload: dict[str, JSON] = field(default_factory=dict)
    queue: str = "default"
    priority: int = 0
    max_attempts: int | None = None
    """None: the kind's default (its handler's max_attempts, else DEFAULT_MAX_ATTEMPTS), set
    when a worker claims the job; a number is the job's own, which the handler's caps."""
    delay_seconds: float = 0.0
    run_after: datetime | None = None
    total: int | None = None
    tenant: str = "default"
    concurrency_key: str | None = None
    idempotency_key: str | None = None
    depends_on: tuple[uuid.UUID | int, ...] = ()
    """Parent jobs (service.workflows): ids of stored jobs, or, in a batch, the position of an
    earlier job of the same batch. The job is not claimable until every parent succeeded."""
    on_parent_failure: str = "cancel"
    """'cancel': a parent that fails or is cancelled cancels this job; 'run': it runs anyway,
    once every parent has ended."""


@dataclass(frozen=True)
class Lease:
    """The fencing token handed out by a claim.

    Every later write by the holder is conditioned on these fields and on the job
    still being ``running``; a write that matches no row means the lease was lost.
    ``attempt`` is the retry budget's count, which a replay resets and a release
    gives back; ``claim`` counts every claim of the job ever and never repeats, so
    a token from an earlier claim cannot match again even when the same worker
    claims the job with the same attempt number. 0 is no claim at all.
    """

    job_id: uuid.UUID
    owner: str
    attempt: int
    claim: int = 0


@dataclass(frozen=True)
class Completion:
    """A success to record: the holder's lease, the result, and the handler's last progress.

    ``done``/``total`` are the values the handler reported after the last heartbeat carried
    them (None: nothing new since). A short job often finishes before its first heartbeat,
    and its last word on progress must not be lost with it.
    """

    lease: Lease
    result: JSON
    done: int | None = None
    total: int | None = None
    items: tuple[ItemOutcome, ...] = ()  # item outcomes not yet written, written with the result
    children: tuple[NewJob, ...] = ()  # jobs the handler enqueued (ctx.enqueue), written with the result


class ItemState(enum.StrEnum):
    """How one item of a job ended, as kept in ``job_items``."""

    OK = "ok"
    FAILED = "failed"


@dataclass(frozen=True)
class ItemOutcome:
    """One item's outcome as a handler recorded it: ok with a result, or failed with an error."""

    index: int
    state: ItemState
    result: JSON = None
    error: str | None = None


@dataclass(frozen=True)
class JobItem:
    """One item's outcome as stored: which attempt wrote it, and when (the database clock)."""

    index: int
    state: ItemState
    result: JSON
    error: str | None
    attempt: int
    finished_at: datetime


@dataclass(frozen=True)
class ItemQuery:
    """One page of a job's item outcomes, in item order (keyset: after ``after_index``)."""

    job_id: uuid.UUID
    tenant: str | None = None  # None: any tenant (the worker's and the operator's reads)
    state: ItemState | None = None
    after_index: int | None = None
    limit: int = 100


@dataclass(frozen=True)
class ItemPage:
    items: list[JobItem]
    next_after_index: int | None


@dataclass(frozen=True)
class ClaimRequest:
    """What ``Store.claim`` takes, for a claim made together with another write
    (``Store.complete_and_claim``): up to ``limit`` jobs for ``worker``."""

    worker: str
    queues: tuple[str, ...]
    limit: int
    lease_seconds: float
    kinds: tuple[str, ...] | None = None
    max_attempts: tuple[tuple[str, int], ...] = ()
    """Per kind, its handler's max_attempts: a job that named none takes it at this claim,
    and a job's own is capped by it (never below the attempt being claimed)."""


@dataclass(frozen=True)
class ClaimedJob:
    """A job handed to a worker: everything the handler needs, with its lease."""

    lease: Lease
    kind: str
    queue: str
    tenant: str
    payload: dict[str, JSON]
    checkpoint: JSON | None
    done: int
    total: int | None
    max_attempts: int
    lease_expires_at: datetime
    items_ok: int = 0  # outcomes earlier attempts recorded: a resumed attempt reads them first
    items_failed: int = 0

    @property
    def id(self) -> uuid.UUID:
        return self.lease.job_id

    @property
    def attempt(self) -> int:
        return self.lease.attempt


@dataclass(frozen=True)
class JobStatus:
    """What a status poll reads. Never the payload, the checkpoint or the result body."""

    id: uuid.UUID
    tenant: str
    queue: str
    kind: str
    state: JobState
    priority: int
    attempts: int
    max_attempts: int
    done: int
    total: int | None
    error: str | None
    cancel_requested: bool
    stale: bool  # running, but its lease has expired: the worker is gone or stuck
    concurrency_key: str | None
    idempotency_key: str | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    run_after: datetime
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    result_id: uuid.UUID | None
    items_ok: int = 0  # items recorded ok / failed so far (kept on the job row: a poll stays one read)
    items_failed: int = 0
    parents_total: int = 0  # workflows: the job's parents, and those not yet settled (it waits for them)
    parents_pending: int = 0
    workflow_id: uuid.UUID | None = None  # the workflow it belongs to (None: an independent job)

    @property
    def current_error(self) -> str | None:
        """The error worth showing: a failed job's, or the last attempt's while a queued job
        waits for its retry. A job that succeeded (or runs) after failed attempts has none:
        the attempts keep theirs. The one rule the API, the CLI and the console show."""
        return self.error if self.state in (JobState.FAILED, JobState.QUEUED) else None


@dataclass(frozen=True)
class StatusRead:
    """One status poll in a batch: a job, and whose it must be — a tenant, or the tenant
    of the API token with this hash (the token is looked up in the same read)."""

    job_id: uuid.UUID
    tenant: str | None = None
    token_hash: str | None = None

    def __post_init__(self) -> None:
        if (self.tenant is None) == (self.token_hash is None):
            raise InvalidInput("a status read names either a tenant or a token hash")


@dataclass(frozen=True)
class Heartbeat:
    """The answer to a heartbeat: does the worker still hold the job, must it stop?"""

    held: bool
    cancel_requested: bool

    @property
    def must_stop(self) -> bool:
        return not self.held or self.cancel_requested


@dataclass(frozen=True)
class FailResult:
    """Where a failed attempt left the job: queued again (with ``run_after``) or terminal."""

    state: JobState
    run_after: datetime | None


@dataclass(frozen=True)
class ReapResult:
    requeued: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def total(self) -> int:
        return self.requeued + self.failed + self.cancelled


DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
"""Jobs one page of a listing holds at most: the API's limit and the store's."""


@dataclass(frozen=True)
class JobQuery:
    """Filters for listing jobs, newest first, with keyset pagination."""

    tenant: str | None = "default"  # None: every tenant's jobs (the operator console)
    state: JobState | None = None
    kind: str | None = None
    queue: str | None = None
    created_after: datetime | None = None
    limit: int = DEFAULT_PAGE_SIZE
    after_id: uuid.UUID | None = None  # the last id of the previous page
    # The console's search (issue 28): every filter is off when None.
    created_before: datetime | None = None
    idempotency_key: str | None = None
    concurrency_key: str | None = None
    error_text: str | None = None  # in the last error of a job that shows one (not a succeeded job's)
    before_id: uuid.UUID | None = None  # the page newer than this id (the first of the next page): "previous"
    workflow_id: uuid.UUID | None = None  # one workflow's jobs (JobStatus.workflow_id)


@dataclass(frozen=True)
class JobPage:
    items: list[JobStatus]
    next_after_id: uuid.UUID | None
    # Set on a page asked for with before_id when still newer jobs match: the previous page's cursor.
    newer_before_id: uuid.UUID | None = None


@dataclass(frozen=True)
class JobCount:
    """How many jobs a search matches: exact, or at least ``matched`` when counting stopped
    at its budget of jobs read (``Store.count_jobs`` says why a count is bounded)."""

    matched: int
    exact: bool


@dataclass(frozen=True)
class ReplayFilter:
    """Which terminal jobs to put back in the queue: ids, or a filter."""

    tenant: str | None = None  # None: every tenant (an operator's command)
    ids: tuple[uuid.UUID, ...] = ()
    kind: str | None = None
    error_like: str | None = None
    error_group: str | None = None  # exactly one group of failure_groups (the console's "replay this group")
    since: datetime | None = None
    include_cancelled: bool = False
    failed_items: bool = False
    """Re-run only the failed items: jobs (succeeded or failed) with failed items go back to
    queued, their failed outcomes removed, their ok ones kept (the next attempt skips those)."""


def replayable_states(which: ReplayFilter) -> list[str]:
    """The states a replay picks from: failed; cancelled too when asked or named by id; and,
    for a replay of failed items, succeeded (a job that finished within max_item_failures)."""
    states = [JobState.FAILED.value]
    if which.include_cancelled or which.ids:
        states.append(JobState.CANCELLED.value)
    if which.failed_items:
        states.append(JobState.SUCCEEDED.value)
    return states


def queued_statuses(
    jobs: Sequence[NewJob], ids: Sequence[uuid.UUID], run_after: Sequence[datetime], created_at: datetime
) -> list[JobStatus]:
    """The statuses of jobs the store has just inserted, built from what it inserted: the
    database supplies only the batch's clock (``created_at``) and each job's ``run_after``,
    so a batch need not be read back.

    The first status is made by JobStatus's own ``__init__``; every other one is filled in
    from the first's fields and its job's own (_own_fields) without calling it: a frozen
    dataclass's ``__init__`` sets each of the 25 fields through ``object.__setattr__``,
    3.8 µs a status against 1.4 µs for this, where a job's whole enqueue in a large batch
    costs ~7.5 µs of the caller's CPU (docs/PERFORMANCE.md, enqueue).
    """
    if not jobs:
        return []
    first = JobStatus(
        **_own_fields(jobs[0], ids[0], run_after[0]),
        state=JobState.QUEUED,
        attempts=0,
        done=0,
        error=None,
        cancel_requested=False,
        stale=False,
        lease_owner=None,
        lease_expires_at=None,
        created_at=created_at,
        started_at=None,
        finished_at=None,
        updated_at=created_at,
        result_id=None,
    )
    shared = vars(first)
    statuses = [first]
    for job, job_id, due in zip(jobs[1:], ids[1:], run_after[1:], strict=True):
        status = object.__new__(JobStatus)
        vars(status).update(shared, **_own_fields(job, job_id, due))
        statuses.append(status)
    return statuses


def _own_fields(job: NewJob, job_id: uuid.UUID, run_after: datetime) -> dict[str, Any]:
    """The fields of a queued job's status that come from the job (queued_statuses)."""
    return {
        "id": job_id,
        "tenant": job.tenant,
        "queue": job.queue,
        "kind": job.kind,
        "priority": job.priority,
        "max_attempts": stored_max_attempts(job),
        "total": job.total,
        "concurrency_key": job.concurrency_key,
        "idempotency_key": job.idempotency_key,
        "run_after": run_after,
    }


def stored_max_attempts(job: NewJob) -> int:
    """The max_attempts a job is stored with: its own, else DEFAULT_MAX_ATTEMPTS until the
    first claim writes its kind's (``max_attempts_default`` marks it)."""
    return DEFAULT_MAX_ATTEMPTS if job.max_attempts is None else job.max_attempts


def require_same_job(job: NewJob, stored: JobStatus, stored_payload: JSON) -> None:
    """A repeated idempotency key must name the same job, or it is an IdempotencyConflict.

    The one rule for every producer, applied by the stores' enqueue (``store.checks.keyed_job``)
    on the enqueue's own transaction. Compared: kind, queue,
    priority, concurrency_key, the payload, and ``total`` and a given ``max_attempts`` while
    no worker has claimed the job yet (a worker may report a different total; a claim
    applies the kind's max_attempts). ``delay_seconds``
    is not compared: the stored run_after moves on retries.
    """
    expected = {
        "kind": job.kind,
        "payload": job.payload,
        "queue": job.queue,
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "total": job.total,
        "concurrency_key": job.concurrency_key,
    }
    found = {
        "kind": stored.kind,
        "payload": stored_payload,
        "queue": stored.queue,
        "priority": stored.priority,
        "max_attempts": stored.max_attempts
        if stored.started_at is None and job.max_attempts is not None
        else job.max_attempts,
        "total": stored.total if stored.started_at is None else job.total,
        "concurrency_key": stored.concurrency_key,
    }
    differing = [name for name in expected if _canonical(expected[name]) != _canonical(found[name])]
    if differing:
        raise IdempotencyConflict(
            f"idempotency key {job.idempotency_key!r} was already used for job {stored.id} "
            f"with a different {', '.join(differing)}; use a new key for a new job"
        )


def _canonical(value: JSON) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


ERROR_GROUP_LENGTH = 80
LEASE_EXPIRED_GROUP = "lease expired"  # a lease-expired job's error group, and its attempt's error

# A job whose lease expired: its error, in one place for both stores. SQLite's reaper
# calls lease_expired_error; PostgreSQL's (one statement, REAP_EXPIRED) is given the
# template as a parameter and fills it with format(), whose %s reads as Python's does.
LEASE_EXPIRED_ERROR = (
    "lease expired %s time(s); last on attempt %s of %s (worker %s stopped heartbeating: crashed, killed or cut off)"
)


def lease_expired_error(expiries: int, attempt: int, max_attempts: int, worker: str) -> str:
    """The error a reaped job gets: how many times its lease expired, on which attempt, whose."""
    return LEASE_EXPIRED_ERROR % (expiries, attempt, max_attempts, worker)


_MASKS = (
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I), "<id>"),
    (re.compile(r"0x[0-9a-f]+", re.I), "<addr>"),
    (re.compile(r"\b[0-9a-f]{16,}\b", re.I), "<hex>"),
    (re.compile(r"\d+(\.\d+)?"), "N"),
)


def error_group(error: str) -> str:
    """The error's identity for grouping failures: one bug, one group.

    Uses the exception line of a traceback (its last line), masks ids, addresses
    and numbers, and keeps the first 80 characters.
    """
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith("Traceback (most recent call last)") else lines[0]
    for pattern, mask in _MASKS:
        line = pattern.sub(mask, line)
    return line[:ERROR_GROUP_LENGTH]


@dataclass(frozen=True)
class WorkerInfo:
    """A worker process as operators see it in the ``workers`` table."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    kinds: tuple[str, ...]
    concurrency: int
    started_at: datetime | None = None  # set by the store from the database clock
    last_seen_at: datetime | None = None


WORKER_ALIVE_SECONDS = 45.0
"""A worker is alive while it touched its row within this long (by the database clock): it touches
with its check-in (service.maintenance.presence), at least every 15 s (WorkerConfig.touch_seconds,
less up to 20 %), so 45 s is three missed touches, not a slow one. (It was 10 s and 30: a fleet's
idle workers spent a fifth of their transactions on the touch; issue 24.) /metrics, ``jobq stats``,
``jobq explain``, the console and the API's explain all count by it."""

WORKER_LATE_SECONDS = 15.0
"""A live worker that has not touched its row for this long missed a touch (10 s +- 20 %, and a
margin): it may have crashed. ``explain`` says so for a due job rather than promise it a slot."""


@dataclass(frozen=True)
class ApiToken:
    """An API token's record. The token itself is never stored, only its hash."""

    id: uuid.UUID
    tenant: str
    name: str | None
    created_at: datetime
    revoked_at: datetime | None
    admin: bool = False  # an operator's token: opens the console, never a tenant's /v1
    read_only: bool = False  # an operator who may look at the console and change nothing


ADMIN_TENANT = "*"
"""The tenant column of an admin token: it belongs to no tenant, and /v1 never accepts it."""


@dataclass(frozen=True)
class Notification:
    """A wake-up from the store. ``payload == "*"`` means "anything on this channel may
    have changed" (sent after the listener reconnected, since notifications sent while
    it was away are lost)."""

    channel: str
    payload: str


@dataclass(frozen=True)
class FailureGroup:
    """Failed jobs that share a kind and an error group: one bug, however many jobs."""

    kind: str
    error_group: str
    count: int
    first_seen: datetime
    last_seen: datetime
    example_job_id: uuid.UUID


@dataclass(frozen=True)
class KindOutcomes:
    """Jobs of one kind that finished within a window, by how they ended."""

    kind: str
    succeeded: int
    failed: int

    @property
    def failure_ratio(self) -> float:
        finished = self.succeeded + self.failed
        return self.failed / finished if finished else 0.0


@dataclass(frozen=True)
class QueueStats:
    """One queue now: depth, what is running, and how long the oldest due job has waited."""

    queue: str
    queued: int
    running: int
    oldest_queued_age_seconds: float | None  # None when nothing is due
    due: int = 0  # of the queued, those due now (the rest wait for a delay or a backoff)


@dataclass(frozen=True)
class ActiveCount:
    """Queued or running jobs of one queue and kind (terminal states are history, not gauges)."""

    queue: str
    kind: str
    state: JobState
    count: int


def id_prefix_range(prefix: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The lowest and highest job id that start with ``prefix`` (hex digits, hyphens
    anywhere, any case): a range the primary key answers, so any prefix is one index read."""
    digits = prefix.strip().replace("-", "").lower()
    if not digits or len(digits) > 32 or any(c not in "0123456789abcdef" for c in digits):
        raise InvalidInput(f"not a job id or the start of one: {prefix.strip()[:40]!r}")
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


@dataclass(frozen=True)
class AuditEntry:
    """One change made from the console, as ``console_audit`` keeps it."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str
    detail: str
    jobs: int


@dataclass(frozen=True)
class Replay:
    """One replay of a job, as ``job_replays`` keeps it: who, when, and what it ended."""

    replayed_at: datetime
    replayed_by: str
    previous_state: str
    previous_error: str | None
    previous_attempts: int


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job, as ``job_attempts`` keeps it: who ran it, when, how it ended."""

    attempt: int
    claim: int
    worker: str
    due_at: datetime
    started_at: datetime
    finished_at: datetime | None  # None while it runs
    outcome: AttemptOutcome | None
    error: str | None


@dataclass(frozen=True)
class OutcomeBucket:
    """Jobs of one queue or kind that succeeded or failed in one time bucket (0 the oldest), with
    their run and queue-wait seconds summed (``runs`` and ``waits`` jobs: a mean is the quotient)."""

    name: str
    bucket: int
    succeeded: int
    failed: int
    run_seconds: float
    runs: int
    wait_seconds: float
    waits: int


@dataclass(frozen=True)
class Throughput:
    """Jobs of one queue that ended in one time bucket of a window (bucket 0 is the oldest)."""

    queue: str
    bucket: int
    succeeded: int
    failed: int
