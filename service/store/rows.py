"""Rows read back as jobq's dataclasses: one mapping for both stores.

PostgreSQL's driver hands back times, ids and arrays already typed; SQLite holds
them as text. Each store passes its own :class:`Readers`, so a column added to a
dataclass is mapped in one place, and the two stores cannot drift apart.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from service.explain import JobFacts, LastAttempt, ScopeRunning
from service.jobs import (
    JSON,
    ApiToken,
    Attempt,
    AttemptOutcome,
    AuditEntry,
    ClaimedJob,
    ItemPage,
    ItemState,
    JobItem,
    JobState,
    JobStatus,
    Lease,
    Replay,
    WorkerInfo,
)
from service.limits import Limit, ScopeUsage


@dataclass(frozen=True)
class Readers:
    """How one store's driver returns a column of each kind (never called with NULL)."""

    time: Callable[[Any], datetime]
    ident: Callable[[Any], uuid.UUID]
    names: Callable[[Any], tuple[str, ...]]
    json: Callable[[Any], JSON]


def _maybe(read: Callable[[Any], Any], value: Any) -> Any:
    return None if value is None else read(value)


def job_status(row: Mapping[str, Any], read: Readers) -> JobStatus:
    return JobStatus(
        id=read.ident(row["id"]),
        tenant=row["tenant"],
        queue=row["queue"],
        kind=row["kind"],
        state=JobState(row["state"]),
        priority=row["priority"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        done=row["done"],
        total=row["total"],
        error=row["error"],
        cancel_requested=bool(row["cancel_requested"]),
        stale=bool(row["stale"]),
        concurrency_key=row["concurrency_key"],
        idempotency_key=row["idempotency_key"],
        lease_owner=row["lease_owner"],
        lease_expires_at=_maybe(read.time, row["lease_expires_at"]),
        run_after=read.time(row["run_after"]),
        created_at=read.time(row["created_at"]),
        started_at=_maybe(read.time, row["started_at"]),
        finished_at=_maybe(read.time, row["finished_at"]),
        updated_at=read.time(row["updated_at"]),
        result_id=_maybe(read.ident, row["result_id"]),
        items_ok=row["items_ok"],
        items_failed=row["items_failed"],
        parents_total=row["parents_total"],
        parents_pending=row["parents_pending"],
        workflow_id=_maybe(read.ident, row["workflow_id"]),
    )


def claimed_job(row: Mapping[str, Any], worker: str, read: Readers) -> ClaimedJob:
    return ClaimedJob(
        lease=Lease(job_id=read.ident(row["id"]), owner=worker, attempt=row["attempts"], claim=row["claims"]),
        kind=row["kind"],
        queue=row["queue"],
        tenant=row["tenant"],
        payload=read.json(row["payload"]),
        checkpoint=_maybe(read.json, row["checkpoint"]),
        done=row["done"],
        total=row["total"],
        max_attempts=row["max_attempts"],
        lease_expires_at=read.time(row["lease_expires_at"]),
        items_ok=row["items_ok"],
        items_failed=row["items_failed"],
    )


def item_page(rows: Sequence[Mapping[str, Any]], limit: int, read: Readers) -> ItemPage:
    """A page of item outcomes from up to ``limit + 1`` rows in item order (one more: is there a next page)."""
    items = [
        JobItem(
            index=row["item_index"],
            state=ItemState(row["state"]),
            result=_maybe(read.json, row["result"]),
            error=row["error"],
            attempt=row["attempt"],
            finished_at=read.time(row["finished_at"]),
        )
        for row in rows[:limit]
    ]
    return ItemPage(items=items, next_after_index=items[-1].index if len(rows) > limit else None)


def api_token(row: Mapping[str, Any], read: Readers) -> ApiToken:
    return ApiToken(
        id=read.ident(row["id"]),
        tenant=row["tenant"],
        name=row["name"],
        created_at=read.time(row["created_at"]),
        revoked_at=_maybe(read.time, row["revoked_at"]),
        admin=bool(row["admin"]),
        read_only=bool(row["read_only"]),
    )


def attempt(row: Mapping[str, Any], read: Readers) -> Attempt:
    return Attempt(
        attempt=row["attempt"],
        claim=row["claim"],
        worker=row["worker"],
        due_at=read.time(row["due_at"]),
        started_at=read.time(row["started_at"]),
        finished_at=_maybe(read.time, row["finished_at"]),
        outcome=_maybe(AttemptOutcome, row["outcome"]),
        error=row["error"],
    )


def worker_info(row: Mapping[str, Any], read: Readers) -> WorkerInfo:
    return WorkerInfo(
        id=row["id"],
        host=row["host"],
        pid=row["pid"],
        queues=read.names(row["queues"]),
        kinds=read.names(row["kinds"]),
        concurrency=row["concurrency"],
        started_at=read.time(row["started_at"]),
        last_seen_at=read.time(row["last_seen_at"]),
    )


def limit_row(row: Mapping[str, Any]) -> Limit:
    return Limit(
        scope=row["scope"],
        concurrency=row["concurrency"],
        rate=row["rate"],
        per_seconds=None if row["per_seconds"] is None else float(row["per_seconds"]),
        weight=None if row["weight"] is None else float(row["weight"]),
    )


def scope_usage_row(row: Mapping[str, Any], read: Readers) -> ScopeUsage:
    return ScopeUsage(
        scope=row["scope"],
        running=row["running"],
        concurrency=row["concurrency"],
        rate=row["rate"],
        per_seconds=None if row["per_seconds"] is None else float(row["per_seconds"]),
        window_start=_maybe(read.time, row["window_start"]),
        window_starts=row["window_starts"],
    )


def job_facts(
    status: JobStatus,
    facts: Mapping[str, Any],
    now: datetime,
    read: Readers,
    usage: Sequence[ScopeUsage],
    running_ids: Callable[[str], list[Any]],
    workers: Sequence[WorkerInfo],
) -> JobFacts:
    """The facts explain words (service.explain), from what one store read.
    ``running_ids(scope)`` reads the running jobs of a full scope the caller may see."""
    scopes = tuple(
        ScopeRunning(
            u,
            tuple(read.ident(i) for i in running_ids(u.scope)) if u.is_full() else (),
        )
        for u in usage
    )
    last = None
    if facts["attempt"] is not None:
        last = LastAttempt(
            attempt=facts["attempt"],
            worker=facts["worker"],
            started_at=read.time(facts["attempt_started_at"]),
            finished_at=_maybe(read.time, facts["attempt_finished_at"]),
            outcome=facts["outcome"],
            error=facts["attempt_error"],
        )
    tenant_scope = f"tenant:{status.tenant}"
    return JobFacts(
        status=status,
        now=now,
        last_attempt=last,
        scopes=scopes,
        tenant_counter_missing=bool(facts["every_tenant_limited"]) and all(u.scope != tenant_scope for u in usage),
        live_workers=tuple(workers),
        lease_worker=next((w for w in workers if w.id == status.lease_owner), None),
        ahead_in_tenant=int(facts["ahead"]),
    )


def replay(row: Mapping[str, Any], read: Readers) -> Replay:
    return Replay(
        replayed_at=read.time(row["replayed_at"]),
        replayed_by=row["replayed_by"],
        previous_state=row["previous_state"],
        previous_error=row["previous_error"],
        previous_attempts=row["previous_attempts"],
    )


def audit_entry(row: Mapping[str, Any], read: Readers) -> AuditEntry:
    return AuditEntry(
        id=row["id"],
        at=read.time(row["at"]),
        actor=row["actor"],
        action=row["action"],
        target=row["target"],
        detail=row["detail"],
        jobs=row["jobs"],
    )
