"""Submitting jobs to PostgreSQL: ENQUEUE_JOBS (one statement for a batch), COPY_JOBS (a
large batch without idempotency keys) and the idempotency keys' read-back."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import postgres
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.rows import dict_row

from service.jobs import JobStatus, NewJob, new_job_ids, queued_statuses, stored_max_attempts
from service.payloads import dump_batch, dump_values, validate_new_jobs
from service.store import checks
from service.store.postgres.caller import caller_connection
from service.store.postgres.connection import Connected, status
from service.store.postgres.errors import translate_errors
from service.store.sqlfiles import statements

_SQL = statements("postgres")

COPY_FROM_JOBS = 100
"""A batch of at least this many jobs, none with an idempotency key, goes by COPY_JOBS.
It takes five round trips (BEGIN, COPY_BATCH_CLOCK, the COPY's two, COMMIT) where
ENQUEUE_JOBS takes one, and saves ~5 µs of PostgreSQL's CPU a job: measured, the two
were even at 50 jobs a call and COPY_JOBS cost less time and CPU from 100
(docs/PERFORMANCE.md, enqueue)."""

ENQUEUE_JOBS = _SQL["enqueue_jobs"]

# -- copy_jobs --
# A large batch without idempotency keys: its rows stream to the server in COPY's
# binary format while the rest are made, straight into jobs — no statement text to
# parse, no JSON document to unpack row by row, no ON CONFLICT's speculative insert
# (the reason keyed batches stay with ENQUEUE_JOBS: COPY has no ON CONFLICT). The same
# columns and values as ENQUEUE_JOBS writes, in one transaction with
# COPY_BATCH_CLOCK: all rows go in or none. COPY takes no expressions, so the
# database's clock is read first and each run_after is worked out here (_run_after).
COPY_JOBS_COLUMNS = (
    ("id", "uuid"),
    ("tenant", "text"),
    ("queue", "text"),
    ("kind", "text"),
    ("payload", "jsonb"),
    ("state", "text"),
    ("priority", "int4"),
    ("attempts", "int4"),
    ("max_attempts", "int4"),
    ("max_attempts_default", "bool"),
    ("done", "int4"),
    ("total", "int4"),
    ("run_after", "timestamptz"),
    ("concurrency_key", "text"),
    ("created_at", "timestamptz"),
    ("updated_at", "timestamptz"),
)
COPY_JOBS = f"COPY jobs ({', '.join(name for name, _ in COPY_JOBS_COLUMNS)}) FROM STDIN (FORMAT BINARY)"

COPY_BATCH_CLOCK = _SQL["copy_batch_clock"]
READ_BY_IDEMPOTENCY_KEYS = _SQL["read_by_idempotency_keys"]


class _JsonbText(Dumper):
    """A payload as COPY_JOBS sends it: JSON text already encoded and checked
    (dump_values), in jsonb's binary form (version 1, then the text); chosen by
    ``set_types`` for the jsonb column, where psycopg's own would encode the text again."""

    format = Format.BINARY
    oid = postgres.types["jsonb"].oid

    def dump(self, obj: str) -> bytes:
        return b"\x01" + obj.encode()


class Submitting(Connected):
    """enqueue and enqueue_many."""

    def enqueue(self, job: NewJob, *, connection: object | None = None, token_hash: str | None = None) -> JobStatus:
        return self.enqueue_many([job], connection=connection, token_hash=token_hash)[0]

    def enqueue_many(
        self, jobs: Sequence[NewJob], *, connection: object | None = None, token_hash: str | None = None
    ) -> list[JobStatus]:
        """With ``connection`` (the caller's psycopg connection, or a SQLAlchemy Connection or
        Session on psycopg: see :mod:`.caller`), the statements run in the caller's
        transaction and are neither committed nor retried here: the jobs exist, and the
        workers are woken, only when the caller commits. With ``token_hash``, the token's
        lookup rides in the same statement (one round trip for the API's submit)."""
        if not jobs:
            return []
        caller = caller_connection(connection) if connection is not None else None
        ids = new_job_ids(len(jobs))
        keyed = any(job.idempotency_key is not None for job in jobs)
        # COPY checks no token: an API batch (a token_hash) is one statement whatever its size.
        if keyed or token_hash is not None or len(jobs) < COPY_FROM_JOBS:
            return self._insert(jobs, ids, keyed, caller, token_hash)
        return self._copy(jobs, ids, caller)

    def _insert(
        self,
        jobs: Sequence[NewJob],
        ids: list[uuid.UUID],
        keyed: bool,
        caller: psycopg.Connection[Any] | None,
        token_hash: str | None,
    ) -> list[JobStatus]:
        """ENQUEUE_JOBS, then READ_BY_IDEMPOTENCY_KEYS if a key was taken."""
        batch = checks.enqueue_rows(jobs, ids, payload=lambda value: value, time=datetime.isoformat)
        params = self._params(
            batch=dump_batch(batch, [job.payload for job in jobs], "payload"),
            keyed=keyed,
            wake_queues=_wake_queues(jobs),
            token_hash=token_hash,
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
        if token_hash is not None:  # the jobs are the token's tenant's (nothing was written for no token)
            tenant = checks.token_scope(row["token_tenant"])
            jobs = [replace(job, tenant=tenant) for job in jobs]
        created_at = row["created_at"]
        later = dict(zip(row["later_ids"] or (), row["later_run_after"] or (), strict=True))
        statuses = queued_statuses(jobs, ids, [later.get(job_id, created_at) for job_id in ids], created_at)
        if row["inserted"] < len(jobs):
            inserted = set(row["ids"] or ())
            taken = [j for j in jobs if j.idempotency_key is not None]
            rows = fetch(
                READ_BY_IDEMPOTENCY_KEYS,
                self._params(tenants=[j.tenant for j in taken], keys=[j.idempotency_key for j in taken]),
            )
            existing = {(r["tenant"], r["idempotency_key"]): status(r) for r in rows}
            for i, (job_id, job) in enumerate(zip(ids, jobs, strict=True)):
                if job_id not in inserted:
                    statuses[i] = existing[(job.tenant, job.idempotency_key)]
        return statuses

    def _copy(
        self, jobs: Sequence[NewJob], ids: list[uuid.UUID], caller: psycopg.Connection[Any] | None
    ) -> list[JobStatus]:
        """COPY_BATCH_CLOCK and COPY_JOBS in one transaction (the caller's, or one of their own)."""
        validate_new_jobs(jobs)
        payloads = dump_values([job.payload for job in jobs], "payload")
        params = self._params(tenants=sorted({job.tenant for job in jobs}), wake_queues=_wake_queues(jobs))

        def copy(conn: psycopg.Connection[Any]) -> tuple[datetime, list[datetime]]:
            with conn.cursor(row_factory=dict_row) as cursor:
                created_at: datetime = cursor.execute(COPY_BATCH_CLOCK, params).fetchall()[0]["created_at"]
                run_after = [_run_after(job, created_at) for job in jobs]
                cursor.adapters.register_dumper(None, _JsonbText)
                with cursor.copy(COPY_JOBS) as rows:
                    rows.set_types([kind for _, kind in COPY_JOBS_COLUMNS])
                    write = rows.write_row
                    for job_id, job, payload, due in zip(ids, jobs, payloads, run_after, strict=True):
                        # COPY_JOBS_COLUMNS, in order
                        write((job_id, job.tenant, job.queue, job.kind, payload, "queued", job.priority, 0,
                               stored_max_attempts(job), job.max_attempts is None, 0, job.total, due,
                               job.concurrency_key, created_at, created_at))  # fmt: skip
            return created_at, run_after

        if caller is None:

            def pooled() -> tuple[datetime, list[datetime]]:
                with self._connection() as conn, conn.transaction():
                    return copy(conn)

            created_at, run_after = self._retrying(pooled)
        else:
            # In the caller's transaction; on an autocommit connection, in one of its own.
            own: AbstractContextManager[Any] = caller.transaction() if caller.autocommit else nullcontext()
            with translate_errors(), own:
                created_at, run_after = copy(caller)
        return queued_statuses(jobs, ids, run_after, created_at)


def _wake_queues(jobs: Sequence[NewJob]) -> str:
    """The JOBS_QUEUED payload: the batch's queues."""
    return ",".join(sorted({job.queue for job in jobs}))


def _run_after(job: NewJob, created_at: datetime) -> datetime:
    """A job's run_after as ENQUEUE_JOBS computes it, ``coalesce(run_after, ts +
    make_interval(secs => delay))``: the delay in whole microseconds, rounded half to even
    as PostgreSQL's rint rounds it, added to the instant (not the wall clock of the
    session's time zone, which a daylight-saving change moves)."""
    if job.run_after is not None:
        return job.run_after
    if not job.delay_seconds:
        return created_at
    delay = timedelta(microseconds=round(job.delay_seconds * 1_000_000))
    return (created_at.astimezone(UTC) + delay).astimezone(created_at.tzinfo)
