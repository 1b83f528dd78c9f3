"""The argument and answer checks both stores make, once: each function is named after
the Store operation it serves, and both stores call it, so the two implementations of
the seam refuse the same input with the same error and read their answers alike.

The rules on the values themselves (storable text and JSON, bounds, a claim's
arguments, a token's tenant) are the domain's, in :mod:`service.payloads`; this
module applies them per operation and turns "no row" or "wrong state" into the
named errors of :mod:`service.errors`. What is encoding for SQL is :mod:`.encoding`.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from service.errors import (
    InvalidInput,
    InvalidTransition,
    JobNotFound,
    LeadershipLost,
    LeaseLost,
    LimitNotFound,
    TokenNotFound,
    Unauthorized,
)
from service.jobs import (
    JSON,
    AttemptOutcome,
    Completion,
    JobCount,
    JobPage,
    JobQuery,
    JobState,
    JobStatus,
    Lease,
    NewJob,
    ReapResult,
    ReplayFilter,
    WorkerInfo,
    error_group,
    replayable_states,
    require_same_job,
    stored_max_attempts,
)
from service.limits import Limit
from service.payloads import (
    MAX_ATTEMPTS_LIMIT,
    MAX_TOTAL,
    check_lease_seconds,
    check_page_size,
    check_progress,
    check_result_size,
    check_throughput_window,
    dump_json,
    is_int,
    storable_error,
    validate_new_jobs,
)
from service.retry import Decision, GiveUp, Retry
from service.store.base import CheckIn, LeaderLease
from service.store.encoding import substring_pattern

MAX_ROW_ID = 2**63 - 1
"""A bigint id's largest value (the audit trail's ids), and SQLite's largest integer."""


class _Row(Protocol):
    """A row as both drivers give it: a psycopg dict row or a sqlite3.Row."""

    def __getitem__(self, key: str, /) -> Any: ...


Row = TypeVar("Row", bound=_Row)


# -- submitting ---------------------------------------------------------------------------
def enqueue_rows(
    jobs: Sequence[NewJob],
    ids: Sequence[uuid.UUID],
    *,
    payloads: Callable[[Sequence[JSON]], Sequence[Any]],
    time: Callable[[datetime], Any],
) -> list[dict[str, Any]]:
    """The jobs of an enqueue checked (validate_new_jobs), as both stores' ENQUEUE_JOBS take
    them: the store encodes the payloads (``payloads``, with the payload rules of
    service.payloads.dump_payloads, or later over the whole batch with dump_payload_batch) and the times."""
    validate_new_jobs(jobs)
    encoded = payloads([job.payload for job in jobs])
    return [
        {
            "id": str(job_id),
            "tenant": job.tenant,
            "queue": job.queue,
            "kind": job.kind,
            "payload": payload,
            "priority": job.priority,
            "max_attempts": stored_max_attempts(job),
            "max_attempts_default": job.max_attempts is None,  # the kind's, set at the first claim
            "total": job.total,
            "delay": float(job.delay_seconds),
            "run_after": None if job.run_after is None else time(job.run_after),
            "concurrency_key": job.concurrency_key,
            "idempotency_key": job.idempotency_key,
        }
        for job_id, job, payload in zip(ids, jobs, encoded, strict=True)
    ]


def keyed_job(job: NewJob, stored: JobStatus, stored_payload: JSON) -> JobStatus:
    """The job an enqueue's idempotency key already names (``stored``, read in the enqueue's own
    transaction), which must be this very request: :func:`service.jobs.require_same_job`'s
    IdempotencyConflict otherwise, and the store writes nothing of the call (all or none).
    Every producer (the API, the CLI, the library, the scheduler) gets the rule here."""
    require_same_job(job, stored, stored_payload)
    return stored


def token_scope(tenant: str | None) -> str:
    """The tenant of the API token an operation is scoped to (``get`` and ``enqueue`` with a
    ``token_hash``), as the store looked it up: None is an unknown, revoked or admin token."""
    if tenant is None:
        raise Unauthorized("unknown or revoked token")
    return tenant


# -- the worker's hot path ------------------------------------------------------------
def heartbeat_args(lease_seconds: float, done: int | None, total: int | None, checkpoint: Any) -> str | None:
    """A heartbeat's bounds checked; its checkpoint as JSON text (None: keep the stored one)."""
    check_lease_seconds(lease_seconds)
    check_progress(done, total)
    return None if checkpoint is None else dump_json(checkpoint, "checkpoint")


def completion_bodies(finished: Sequence[Completion], max_result_bytes: int) -> list[str]:
    """Each completion's progress checked and its result as JSON text (a null result stays JSON
    null), at most ``max_result_bytes`` (ResultTooLarge: the worker fails the attempt for good)."""
    for item in finished:
        check_progress(item.done, item.total)
    return [check_result_size(dump_json(item.result, "result"), max_result_bytes) for item in finished]


@dataclass(frozen=True)
class FailArgs:
    """A failure as both stores' FAIL_JOB take it."""

    error: str
    error_group: str
    retry: bool
    delay: float

    def params(self) -> dict[str, Any]:
        return {"error": self.error, "error_group": self.error_group, "retry": self.retry, "delay": self.delay}


def fail_args(error: str, decision: Decision) -> FailArgs:
    """The error (non-empty, storable, grouped) and the retry decision (queue again?, after how long)."""
    if not isinstance(error, str) or not error.strip():
        raise InvalidInput("error must be a non-empty string")
    error = storable_error(error)
    retry, delay = _retry_params(decision)
    return FailArgs(error, error_group(error), retry, delay)


def _retry_params(decision: Decision) -> tuple[bool, float]:
    if isinstance(decision, GiveUp):
        return False, 0.0
    if not isinstance(decision, Retry):
        raise InvalidInput(f"a failure needs a retry decision (Retry or GiveUp), not {type(decision).__name__}")
    delay = decision.delay_seconds
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay < math.inf:
        raise InvalidInput("a retry's delay must be a finite number of seconds, at least 0")
    return True, float(delay)


def reap_delays(delays: Sequence[float]) -> list[float]:
    """The reaper's delays, one per attempt number up to MAX_ATTEMPTS_LIMIT (RetryPolicy.delays_by_attempt)."""
    values = list(delays)
    if len(values) != MAX_ATTEMPTS_LIMIT:
        raise InvalidInput(f"reap needs one delay per attempt number 1..{MAX_ATTEMPTS_LIMIT}, not {len(values)}")
    return [_retry_params(Retry(delay))[1] for delay in values]


def reap_result(jobs_by_state: Mapping[str, int]) -> ReapResult:
    """What a reap did, from the count of reaped jobs per state they ended in."""
    return ReapResult(
        requeued=jobs_by_state.get(JobState.QUEUED, 0),
        failed=jobs_by_state.get(JobState.FAILED, 0),
        cancelled=jobs_by_state.get(JobState.CANCELLED, 0),
    )


def receipt(row: Row | None, *outcomes: AttemptOutcome) -> Row | None:
    """A fenced write matched nothing: the attempt's row (READ_ATTEMPT_RECEIPT) says whether it
    landed earlier (a retried call) with one of ``outcomes``; None means the lease is lost."""
    return row if row is not None and row["outcome"] in outcomes else None


def require_receipt(row: Row | None, lease: Lease, *outcomes: AttemptOutcome) -> Row:
    found = receipt(row, *outcomes)
    if found is None:
        raise LeaseLost(lease.job_id, lease.attempt)
    return found


# -- reads and the operators' writes ------------------------------------------------------
def item_cursor(after_index: int | None) -> int:
    """A page of items starts after this index (-1: from the first); an index no job has is
    refused here, not left to overflow SQLite's 64-bit integers."""
    if after_index is None:
        return -1
    if not is_int(after_index) or not 0 <= after_index <= MAX_TOTAL:
        raise InvalidInput(f"a page of items starts after an item's index, 0 to {MAX_TOTAL}, not {after_index!r}")
    return after_index


def audit_cursor(before_id: int | None) -> int | None:
    """A page of the audit trail ends before this entry's id (a 64-bit id), or None: the newest."""
    if before_id is not None and (not is_int(before_id) or not 0 <= before_id <= MAX_ROW_ID):
        raise InvalidInput(f"a page of the audit trail ends before an entry's number, not {before_id!r}")
    return before_id


def page_limit(limit: int) -> int:
    """A page's size checked; the rows to ask for: one more tells whether another page follows."""
    check_page_size(limit)
    return limit + 1


def job_page(statuses: Sequence[JobStatus], query: JobQuery) -> JobPage:
    """A page of jobs from up to ``limit + 1`` rows, keyset-paged on the id. Rows read for
    ``before_id`` come nearest first (ascending): the page is turned round to newest first,
    older jobs follow it (``before_id`` itself at least), newer ones when a row was left over."""
    items = list(statuses[: query.limit])
    more = len(statuses) > query.limit
    if query.before_id is None:
        return JobPage(items=items, next_after_id=items[-1].id if more else None)
    items.reverse()
    return JobPage(
        items=items,
        next_after_id=items[-1].id if items else query.before_id,
        newer_before_id=items[0].id if more else None,
    )


LISTING_STATEMENTS = {
    "tenant": "jobs",
    "all": "all_jobs",
    "errored": "errored_jobs",
    "by_idempotency_key": "jobs_by_idempotency_key",
    "by_concurrency_key": "jobs_by_concurrency_key",
    "by_workflow": "jobs_by_workflow",
}
"""Each listing of :func:`job_listing` and the name its statements share in both dialects'
``.sql`` files: ``list_<name>`` (a page), ``list_<name>_newer`` (the page before it) and
``count_<name>`` (a capped count)."""


def listing_statements(sql: Mapping[str, str]) -> dict[str, tuple[str, str, str]]:
    """A dialect's statements for each listing: (a page, the page before it, a capped count)."""
    return {
        listing: (sql[f"list_{name}"], sql[f"list_{name}_newer"], sql[f"count_{name}"])
        for listing, name in LISTING_STATEMENTS.items()
    }


def job_listing(query: JobQuery) -> str:
    """Which index a listing walks, by the most selective filter it has: one key's or one
    workflow's jobs, the errored jobs (for an error text), a tenant's, or the primary key. The stores keep one
    statement of each (a page, the page before, a count) under this name."""
    if query.after_id is not None and query.before_id is not None:
        raise InvalidInput("a page follows one cursor: after or before, not both")
    if query.idempotency_key is not None:
        return "by_idempotency_key"
    if query.workflow_id is not None:  # one workflow: its jobs, however many, and no other
        return "by_workflow"
    if query.concurrency_key is not None:
        return "by_concurrency_key"
    if query.error_text is not None:
        return "errored"
    return "all" if query.tenant is None else "tenant"


MAX_COUNT_BUDGET = 100_000
"""Jobs a count may read at most: a few hundred milliseconds of index, whatever is asked."""


def count_budget(budget: int) -> int:
    """A count's budget of jobs read, checked."""
    if not isinstance(budget, int) or isinstance(budget, bool) or not 1 <= budget <= MAX_COUNT_BUDGET:
        raise InvalidInput(f"a count reads from 1 to {MAX_COUNT_BUDGET:,} jobs")
    return budget


def job_count(row: Row | None, budget: int) -> JobCount:
    """A count's answer: exact when its walk read no more than ``budget`` jobs (it asked for one more)."""
    matched, read = (int(row["n"]), int(row["read"])) if row else (0, 0)
    return JobCount(matched=matched, exact=read <= budget)


def found(row: Row | None, job_id: uuid.UUID) -> Row:
    """The job's row, or JobNotFound: another tenant's job reads as a missing one."""
    if row is None:
        raise JobNotFound(job_id)
    return row


def result_row(row: Row | None, job_id: uuid.UUID) -> Row:
    """A result is there to read only for a succeeded job."""
    row = found(row, job_id)
    if row["state"] != JobState.SUCCEEDED:
        raise InvalidTransition(f"job {job_id} has no result: it is {row['state']}", row["state"])
    return row


def chunk_bounds(offset: int, length: int) -> None:
    """A chunk of a result: from a byte offset (0 or more), at least one byte long."""
    if offset < 0 or length < 1:
        raise InvalidInput(f"a result chunk starts at 0 or later and holds a byte or more (not {offset}, {length})")


def not_cancellable(current: JobStatus) -> InvalidTransition:
    """CANCEL_JOB matched nothing though the job exists: it has ended."""
    return InvalidTransition(f"job {current.id} is already {current.state.value}", current.state.value)


def not_waiting(current: JobStatus) -> InvalidTransition:
    """MAKE_DUE matched nothing though the job exists: it runs, has ended, or is due already."""
    why = "due already" if current.state.value == "queued" else current.state.value
    return InvalidTransition(f"job {current.id} is {why}: nothing to run now", current.state.value)


def replay_args(which: ReplayFilter) -> dict[str, Any]:
    """A replay's filter as both stores' statements take it (SQLite encodes the lists as JSON)."""
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


def limit_args(limit: Limit) -> dict[str, Any]:
    """SET_LIMIT's values (a Limit is checked when it is made)."""
    return {
        "scope": limit.scope,
        "concurrency": limit.concurrency,
        "rate": limit.rate,
        "per_seconds": limit.per_seconds,
        "weight": limit.weight,
    }


def require_deleted(deleted: bool, scope: str) -> None:
    if not deleted:
        raise LimitNotFound(scope)


def revoked(row: Row | None, token_id: uuid.UUID) -> Row:
    if row is None:
        raise TokenNotFound(token_id)
    return row


def worker_args(worker: WorkerInfo) -> dict[str, Any]:
    """REGISTER_WORKER's values: the queues and kinds a worker serves, as JSON lists."""
    return {
        "id": worker.id,
        "host": worker.host,
        "pid": worker.pid,
        "queues": json.dumps(list(worker.queues)),
        "kinds": json.dumps(list(worker.kinds)),
        "concurrency": worker.concurrency,
    }


# -- leadership ---------------------------------------------------------------------------
def leadership_args(name: str, owner: str, lease_seconds: float) -> dict[str, Any]:
    """ACQUIRE_LEADERSHIP's values: a named leadership, a named candidate, a lease as a job's."""
    for what, value in (("a leadership's name", name), ("a leader's owner", owner)):
        if not isinstance(value, str) or not value.strip():
            raise InvalidInput(f"{what} must be non-empty text, not {value!r}")
    check_lease_seconds(lease_seconds, "a leadership's lease_seconds")
    return {"name": name, "owner": owner, "lease_seconds": float(lease_seconds)}


def leader_token(lease: LeaderLease) -> dict[str, Any]:
    """The fencing token a leader's write is checked against: (name, owner, term)."""
    return {"leader_name": lease.name, "leader_owner": lease.owner, "leader_term": lease.term}


def require_leader(row: object | None, lease: LeaderLease) -> None:
    """CHECK_LEADER found no unexpired lease of this owner in this term: the write must change nothing."""
    if row is None:
        raise LeadershipLost(lease.name, lease.owner, lease.term)


def leadership_answer(row: Row | None, read_time: Callable[[Any], datetime]) -> tuple[LeaderLease | None, float]:
    """ACQUIRE_LEADERSHIP's answer: the lease when the caller holds it now, else None and the
    seconds until the holder's lease ends (0: free now, or nothing read)."""
    if row is None:
        return None, 0.0
    if row["mine"]:
        return leader_lease(row, read_time), 0.0
    return None, max(float(row["free_in"]), 0.0)


def leader_lease(row: Row | None, read_time: Callable[[Any], datetime]) -> LeaderLease | None:
    """A leaders row (None: no row came back) as the token its holder writes with."""
    if row is None:
        return None
    return LeaderLease(
        name=row["name"],
        owner=row["owner"],
        term=int(row["term"]),
        acquired_at=read_time(row["acquired_at"]),
        expires_at=read_time(row["expires_at"]),
    )


def check_in_args(worker_id: str, name: str, lease_seconds: float, alive_seconds: float) -> dict[str, Any]:
    """CHECK_IN's values: the leadership's (the worker is its candidate) and the liveness window."""
    if not isinstance(alive_seconds, int | float) or isinstance(alive_seconds, bool) or not alive_seconds > 0:
        raise InvalidInput(f"a worker's liveness window must be more than 0 seconds, not {alive_seconds!r}")
    return {**leadership_args(name, worker_id, lease_seconds), "alive_seconds": float(alive_seconds)}


def check_in_answer(
    lead: Row | None, peers: Any, next_schedule_in: Any, jobs_running: Any, read_time: Callable[[Any], datetime]
) -> CheckIn:
    """CHECK_IN's answer: the leadership's (as ACQUIRE_LEADERSHIP's; a row of NULLs when it read
    none), the peers (at least this worker), the next schedule's due time, whether a job runs."""
    lease, free_in = leadership_answer(lead if lead is not None and lead["name"] is not None else None, read_time)
    return CheckIn(
        lease=lease,
        free_in=free_in,
        peers=max(int(peers or 1), 1),
        next_schedule_in=None if next_schedule_in is None else float(next_schedule_in),
        jobs_running=bool(jobs_running),
    )


OUTCOME_GROUPINGS = ("queue", "kind")


def outcome_grouping(by: str) -> str:
    """What the console's charts group by: a queue or a kind (never a column named by input)."""
    if by not in OUTCOME_GROUPINGS:
        raise InvalidInput(f"group by queue or kind, not {by!r}")
    return by


def outcome_window(by: str, window_seconds: float, buckets: int) -> dict[str, Any]:
    """The parameters of recent_outcomes: the grouping, the window and its buckets checked."""
    width = check_throughput_window(window_seconds, buckets)
    return {"by": outcome_grouping(by), "window": float(window_seconds), "buckets": buckets, "bucket_seconds": width}
