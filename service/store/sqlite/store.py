"""The SQLite store: one host, many processes sharing one file.

WAL mode lets readers (the API) run beside the one writer; a busy timeout makes
processes queue for the write lock instead of failing. Every write runs under
``BEGIN IMMEDIATE``, which takes the write lock up front, so a claim's read and
its update cannot interleave with another process's claim: that is SQLite's
answer to ``FOR UPDATE SKIP LOCKED``. There is no LISTEN/NOTIFY; workers poll.

"Now" is read once per operation from SQLite's clock (``NOW``), or from the
injected test clock, and every lease and due time is computed from it in SQL.
Timestamps are UTC text ``YYYY-MM-DD HH:MM:SS.SSS``, which sorts as it compares.

The class is made of the store's areas, one module each, named as the PostgreSQL
store's (submit, reads, items, ops, maintenance, limits, tokens, workers: each its
statements and the operations that run them, on the plumbing of :mod:`.connection`);
the worker's hot path (claim, heartbeat, complete, fail, release) is here, its
statements in :mod:`.statements`. A new area is a new module with a class on
``Connected``, added to the bases below.
"""

from __future__ import annotations

import bisect
import json
import sqlite3
import threading
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

from service.errors import InvalidInput, JobNotFound, LeaseLost
from service.jobs import (
    JSON,
    AttemptOutcome,
    ClaimedJob,
    ClaimRequest,
    Completion,
    FailResult,
    Heartbeat,
    ItemOutcome,
    JobState,
    Lease,
    new_job_id,
)
from service.limits import ScopeUsage, job_scopes, rate_window
from service.payloads import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_MAX_RESULT_BYTES, check_claim
from service.retry import Decision
from service.store import checks
from service.store.base import Clock
from service.store.encoding import item_rows
from service.store.fairness import Candidate, advance_cursor, choose, tenants_to_visit
from service.store.rows import claimed_job, scope_usage_row
from service.store.sqlite.connection import READ as _READ
from service.store.sqlite.connection import Connected, close_attempt, fence
from service.store.sqlite.console import Console
from service.store.sqlite.errors import translate_errors
from service.store.sqlite.items import Items, item_deltas, store_items
from service.store.sqlite.leadership import Leadership
from service.store.sqlite.limits import Limits
from service.store.sqlite.maintenance import Maintenance
from service.store.sqlite.ops import Operations
from service.store.sqlite.reads import Reads
from service.store.sqlite.schedules import Schedules
from service.store.sqlite.statements import (
    ACKNOWLEDGE_CANCEL,
    CLAIM_JOB,
    COMPLETE_JOBS,
    COUNT_STARTS,
    COUNTERS,
    DEFAULT_TENANT_LIMITED,
    FAIL_JOB,
    HAS_CLAIMABLE,
    NEXT_TENANT,
    OPEN_ATTEMPT,
    READ_ATTEMPT_RECEIPT,
    RELEASE_JOB,
    RENEW_LEASE,
    STORE_RESULT,
    TENANT_JOBS,
    TENANT_RUNNING,
    TENANT_WEIGHT,
)
from service.store.sqlite.submit import Submitting
from service.store.sqlite.timestamps import from_text, to_text
from service.store.sqlite.tokens import Tokens
from service.store.sqlite.workers import Workers
from service.store.sqlite.workflows import insert_dependents, release_children, settle_dependents
from service.workflows import children_refused

BUSY_TIMEOUT_SECONDS = 30.0


class SqliteStore(
    Submitting,
    Operations,
    Limits,
    Items,
    Maintenance,
    Schedules,
    Leadership,
    Tokens,
    Reads,
    Workers,
    Console,
    Connected,
):
    """The queue in one SQLite file. One connection per store, shared under a lock."""

    def __init__(
        self,
        database_url: str,
        *,
        clock: Clock | None = None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        if not database_url.startswith("sqlite:///"):
            raise InvalidInput("a SQLite URL looks like sqlite:///path/to/file.db")
        self.database_url = database_url
        self.max_result_bytes = max_result_bytes
        self.max_payload_bytes = max_payload_bytes
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

    def has_claimable(self, queues: Sequence[str], kinds: Sequence[str] | None = None) -> bool:
        params = {"queues": json.dumps(list(queues)), "kinds": json.dumps(list(kinds)) if kinds is not None else None}
        with self._read() as (conn, now):
            return bool(conn.execute(HAS_CLAIMABLE, {**params, "now": now}).fetchone()["claimable"])

    def heartbeat(
        self,
        lease: Lease,
        lease_seconds: float,
        done: int | None = None,
        total: int | None = None,
        checkpoint: JSON | None = None,
        items: Sequence[ItemOutcome] = (),
    ) -> Heartbeat:
        encoded = checks.heartbeat_args(lease_seconds, done, total, checkpoint)
        rows = item_rows(lease, items, self.max_result_bytes)
        with self._write() as (conn, now):
            row = conn.execute(
                RENEW_LEASE,
                {
                    **fence(lease),
                    "now": now,
                    "lease_seconds": float(lease_seconds),
                    "done": done,
                    "total": total,
                    "checkpoint": encoded,
                    **item_deltas(conn, lease, rows),
                },
            ).fetchone()
            if row is not None:
                store_items(conn, rows, now)
        if row is None:
            return Heartbeat(held=False, cancel_requested=False)
        return Heartbeat(held=True, cancel_requested=bool(row["cancel_requested"]))

    def complete(self, lease: Lease, result: JSON, done: int | None = None, total: int | None = None) -> None:
        if self.complete_many([Completion(lease, result, done, total)]):
            raise LeaseLost(lease.job_id, lease.attempt)

    def complete_many(self, finished: Sequence[Completion]) -> list[Lease]:
        bodies = checks.completion_bodies(finished, self.max_result_bytes)
        rows_per_job = [item_rows(item.lease, item.items, self.max_result_bytes) for item in finished]
        lost = []
        with self._write() as (conn, now):
            for item, body, rows in zip(finished, bodies, rows_per_job, strict=True):
                lease = item.lease
                params = {
                    **fence(lease),
                    "now": now,
                    "result_id": str(new_job_id()),
                    "body": body,
                    "done": item.done,
                    "total": item.total,
                    **item_deltas(conn, lease, rows),
                }
                written = conn.execute(COMPLETE_JOBS, params).fetchone()
                if written is None:
                    if checks.receipt(_receipt(conn, lease), AttemptOutcome.SUCCEEDED) is None:
                        lost.append(lease)
                    continue
                if written["dependents_version"]:  # workflows: its children count one parent less
                    release_children(conn, now, lease.job_id)
                if item.children:  # the jobs its handler enqueued, fenced with the result
                    try:
                        insert_dependents(conn, now, item.children, None, self.max_payload_bytes, lease.job_id)
                    except JobNotFound as exc:  # the batch rolls back; the finisher writes it job by job
                        raise children_refused(exc) from None
                conn.execute(STORE_RESULT, params)
                store_items(conn, rows, now)
                close_attempt(conn, lease, now, AttemptOutcome.SUCCEEDED)
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
        failure = checks.fail_args(error, decision)
        with self._write() as (conn, now):
            row = conn.execute(FAIL_JOB, {**fence(lease), "now": now, **failure.params()}).fetchone()
            if row is None:
                row = checks.require_receipt(_receipt(conn, lease), lease, AttemptOutcome.FAILED)
            else:
                close_attempt(conn, lease, now, AttemptOutcome.FAILED, failure.error)
                if row["state"] in (JobState.FAILED, JobState.CANCELLED):
                    settle_dependents(conn, now, [lease.job_id])
        return _fail_result(row["state"], row["run_after"])

    def release(self, lease: Lease) -> None:
        # A job whose cancellation was requested ends cancelled instead (see RELEASE_JOB).
        with self._write() as (conn, now):
            row = conn.execute(RELEASE_JOB, {**fence(lease), "now": now}).fetchone()
            if row is None:
                checks.require_receipt(_receipt(conn, lease), lease, AttemptOutcome.RELEASED, AttemptOutcome.CANCELLED)
                return
            cancelled = row["state"] == JobState.CANCELLED
            close_attempt(conn, lease, now, AttemptOutcome.CANCELLED if cancelled else AttemptOutcome.RELEASED)
            if cancelled:
                settle_dependents(conn, now, [lease.job_id])

    def acknowledge_cancel(self, lease: Lease) -> None:
        with self._write() as (conn, now):
            if conn.execute(ACKNOWLEDGE_CANCEL, {**fence(lease), "now": now}).fetchone() is None:
                checks.require_receipt(_receipt(conn, lease), lease, AttemptOutcome.CANCELLED)
                return
            close_attempt(conn, lease, now, AttemptOutcome.CANCELLED)
            settle_dependents(conn, now, [lease.job_id])


def register_functions(conn: sqlite3.Connection) -> None:
    """What the store's SQL calls that SQLite lacks: PostgreSQL's width_bucket."""
    conn.create_function("width_bucket", 2, _width_bucket, deterministic=True)


def _width_bucket(value: float | None, bounds_json: str) -> int | None:
    """PostgreSQL's width_bucket(value, thresholds): how many thresholds are <= value."""
    if value is None:
        return None
    return bisect.bisect_right(json.loads(bounds_json), value)


def _receipt(conn: sqlite3.Connection, lease: Lease) -> sqlite3.Row | None:
    """The attempt's row, read when a fenced write matched nothing (see checks.receipt)."""
    row: sqlite3.Row | None = conn.execute(READ_ATTEMPT_RECEIPT, fence(lease)).fetchone()
    return row


def _fail_result(state: str, run_after: str | None) -> FailResult:
    queued = state == JobState.QUEUED
    return FailResult(state=JobState(state), run_after=from_text(run_after) if queued and run_after else None)
