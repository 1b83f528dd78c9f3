"""Why isn't my job running? The facts a store gathers about one job, worded. No I/O.

The store reads the facts in a few queries (:meth:`Store.explain_facts`); this
module alone decides what they mean, so ``jobq explain`` and
``GET /v1/jobs/{id}/explain`` say the same thing in the same words.

For a queued job the reasons are checked in the order the claim itself would
stop at them: not due yet (a delay, or a retry backoff with the last error); no
live worker for its queue or its kind; a full scope; a rate limit; and when
nothing holds it back, its place in its tenant's line.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from service.durations import format_duration
from service.jobs import WORKER_LATE_SECONDS, JobState, JobStatus, WorkerInfo
from service.limits import ScopeUsage
from service.workflows import Relative

SHOWN_RUNNING_IDS = 20
"""A full scope lists at most this many of its running jobs that the caller may see."""

SHOWN_PARENTS = 20
"""A job waiting for parents names at most this many of the unfinished ones."""


@dataclass(frozen=True)
class LastAttempt:
    attempt: int
    worker: str
    started_at: datetime
    finished_at: datetime | None
    outcome: str | None
    error: str | None


@dataclass(frozen=True)
class ScopeRunning:
    """A limited scope of the job: its counter, and the running jobs in it the caller may see."""

    usage: ScopeUsage
    visible_job_ids: tuple[uuid.UUID, ...]


@dataclass(frozen=True)
class JobFacts:
    """Everything ``explain`` needs, read from the database as it is now."""

    status: JobStatus
    now: datetime
    last_attempt: LastAttempt | None
    scopes: tuple[ScopeRunning, ...]  # the job's scopes that have a counter
    tenant_counter_missing: bool  # tenant:* limits every tenant, and this tenant has no counter
    live_workers: tuple[WorkerInfo, ...]  # seen recently
    lease_worker: WorkerInfo | None  # running: the worker holding the lease, if registered
    ahead_in_tenant: int  # due jobs of the tenant in the job's queue ahead of it in its line
    unfinished_parents: tuple[Relative, ...] = ()  # workflows: parents still queued or running (a few)


@dataclass(frozen=True)
class Reason:
    code: str  # one of REASON_CODES
    message: str
    details: dict[str, Any] = field(default_factory=dict)


REASON_CODES = (
    "waiting_for_parents",
    "not_due",
    "no_worker_for_queue",
    "no_worker_for_kind",
    "scope_full",
    "rate_limited",
    "in_line",
    "running",
    "stale",
    "succeeded",
    "failed",
    "cancelled",
)


@dataclass(frozen=True)
class Explanation:
    job_id: uuid.UUID
    state: JobState
    summary: str  # the first reason's message: the one that holds the job now
    reasons: tuple[Reason, ...]


def explain(facts: JobFacts) -> Explanation:
    status = facts.status
    if status.state is JobState.RUNNING:
        reasons = [_running(facts)]
    elif status.state is JobState.QUEUED:
        reasons = _queued(facts)
    else:
        reasons = [_ended(facts)]
    return Explanation(job_id=status.id, state=status.state, summary=reasons[0].message, reasons=tuple(reasons))


def _at(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def _queued(facts: JobFacts) -> list[Reason]:
    status, now = facts.status, facts.now
    reasons: list[Reason] = []
    if status.parents_pending > 0:
        # Held until its parents are done: its run_after is the hold's, not a due time to word.
        unfinished = facts.unfinished_parents[:SHOWN_PARENTS]
        names = ", ".join(f"{p.id} ({p.kind}, {p.state.value})" for p in unfinished)
        more = status.parents_pending - len(unfinished)
        reasons.append(
            Reason(
                "waiting_for_parents",
                f"waiting for {status.parents_pending} of {status.parents_total} parents"
                + (f": {names}" if names else "")
                + (f" and {more} more" if more > 0 else ""),
                {
                    "parents_pending": status.parents_pending,
                    "parents_total": status.parents_total,
                    "unfinished": [{"job_id": str(p.id), "kind": p.kind, "state": p.state.value} for p in unfinished],
                },
            )
        )
    elif status.run_after > now:
        wait = format_duration((status.run_after - now).total_seconds())
        last = facts.last_attempt
        if status.attempts > 0 and status.error:
            number = last.attempt if last is not None else status.attempts
            message = (
                f"due at {_at(status.run_after)} (in {wait}): a retry backoff after attempt {number}"
                f" of {status.max_attempts}, whose error was: {status.error.splitlines()[0]}"
            )
            details = {"due_at": _at(status.run_after), "after_attempt": number, "error": status.error}
        else:
            message = f"due at {_at(status.run_after)} (in {wait}): it was submitted with a delay"
            details = {"due_at": _at(status.run_after)}
        reasons.append(Reason("not_due", message, details))
    serving = [w for w in facts.live_workers if status.queue in w.queues]
    if not serving:
        reasons.append(
            Reason(
                "no_worker_for_queue",
                f"no live worker serves its queue {status.queue!r}",
                {
                    "queue": status.queue,
                    "live_workers": len(facts.live_workers),
                    "queues_served": sorted({q for w in facts.live_workers for q in w.queues}),
                },
            )
        )
    elif not any(status.kind in w.kinds for w in serving):
        kinds = sorted({k for w in serving for k in w.kinds})
        reasons.append(
            Reason(
                "no_worker_for_kind",
                f"no live worker of queue {status.queue!r} handles its kind {status.kind!r}"
                f" (they handle: {', '.join(kinds) or 'nothing'})",
                {"kind": status.kind, "kinds_handled": kinds},
            )
        )
    if facts.tenant_counter_missing:
        reasons.append(
            Reason(
                "scope_full",
                f"the scope tenant:{status.tenant} has no counter yet",
                {"scope": f"tenant:{status.tenant}"},
            )
        )
    for scope in facts.scopes:
        usage = scope.usage
        if usage.is_full():
            shown = [str(i) for i in scope.visible_job_ids[:SHOWN_RUNNING_IDS]]
            reasons.append(
                Reason(
                    "scope_full",
                    f"the scope {usage.scope} is full ({usage.running} of {usage.concurrency} running)",
                    {
                        "scope": usage.scope,
                        "running": usage.running,
                        "limit": usage.concurrency,
                        "running_job_ids": shown,
                    },
                )
            )
        next_start = usage.next_start_at(now)
        if next_start is not None:
            reasons.append(
                Reason(
                    "rate_limited",
                    f"the rate limit of {usage.scope} ({usage.rate} per {usage.per_seconds:g} s) allows the next"
                    f" start at {_at(next_start)}",
                    {"scope": usage.scope, "next_start_at": _at(next_start)},
                )
            )
    latest = max((w.last_seen_at for w in serving if w.last_seen_at is not None), default=None)
    if not reasons and latest is not None and (now - latest).total_seconds() > WORKER_LATE_SECONDS:
        # Alive by WORKER_ALIVE_SECONDS, but every one of them missed its last touch: a crashed
        # worker looks like this until it ages out, and it has no slot to give (issue 26).
        silent = round((now - latest).total_seconds())
        reasons.append(
            Reason(
                "no_worker_for_queue",
                f"no worker of its queue {status.queue!r} has reported for {silent} s (they report every"
                f" 10 s): the last may have stopped; a live worker of the queue takes it",
                {"queue": status.queue, "silent_seconds": silent, "workers": len(serving)},
            )
        )
    if not reasons:
        ahead = facts.ahead_in_tenant
        reasons.append(
            Reason(
                "in_line",
                f"it is due and waits its turn: {ahead} job(s) of its tenant are ahead of it in its tenant's share"
                if ahead
                else "it is due and next in its tenant's line: a free worker slot takes it",
                {"ahead": ahead},
            )
        )
    return reasons


def _running(facts: JobFacts) -> Reason:
    status, now = facts.status, facts.now
    worker = facts.lease_worker
    where = (
        f"on worker {status.lease_owner} (host {worker.host}, pid {worker.pid})"
        if worker is not None
        else f"on worker {status.lease_owner} (no longer registered)"
    )
    heartbeat = facts.status.updated_at
    ago = format_duration((now - heartbeat).total_seconds())
    details = {
        "worker": status.lease_owner,
        "host": worker.host if worker else None,
        "pid": worker.pid if worker else None,
        "attempt": status.attempts,
        "max_attempts": status.max_attempts,
        "last_heartbeat_at": _at(heartbeat),
        "lease_expires_at": _at(status.lease_expires_at),
    }
    message = (
        f"running {where}, attempt {status.attempts} of {status.max_attempts}, last heartbeat {ago} ago,"
        f" lease until {_at(status.lease_expires_at)}"
    )
    if status.stale:
        return Reason(
            "stale",
            message + ": stale, the lease expired (its worker is gone or stuck); the reaper will queue it again",
            details,
        )
    return Reason("running", message, details)


def _ended(facts: JobFacts) -> Reason:
    status = facts.status
    error = status.error or (facts.last_attempt.error if facts.last_attempt else None)
    how = {JobState.SUCCEEDED: "succeeded", JobState.FAILED: "failed", JobState.CANCELLED: "was cancelled"}
    message = f"it {how[status.state]} at {_at(status.finished_at)} after {status.attempts} attempt(s)"
    if error and status.state is not JobState.SUCCEEDED:
        message += f"; last error: {error.splitlines()[0]}"
    return Reason(
        status.state.value,
        message,
        {"finished_at": _at(status.finished_at), "attempts": status.attempts, "error": error},
    )
