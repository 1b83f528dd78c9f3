"""Submitting jobs to PostgreSQL: ENQUEUE_JOBS (one statement for a batch), COPY_JOBS (a
large batch without idempotency keys) and the idempotency keys' read-back and check."""

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

from service.jobs import JSON, JobStatus, NewJob, new_job_ids, queued_statuses, stored_max_attempts
from service.payloads import dump_payload_batch, dump_payloads, validate_new_jobs
from service.store import checks
from service.store.postgres.caller import caller_connection
from service.store.postgres.connection import status
from service.store.postgres.errors import translate_errors
from service.store.postgres.queries import GET_PAYLOAD
from service.store.postgres.workflows import Workflows
from service.store.sqlfiles import statements
from service.workflows import has_parents

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
    (dump_payloads), in jsonb's binary form (version 1, then the text); chosen by
    ``set_types`` for the jsonb column, where psycopg's own would encode the text again."""

    format = Format.BINARY
    oid = postgres.types["jsonb"].oid

    def dump(self, obj: str) -> bytes:
        return b"\x01" + obj.encode()


class Submitting(Workflows):
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
        if has_parents(jobs):  # a workflow's batch: its own path, so a plain batch pays nothing for it
            return self._enqueue_dependents(jobs, caller, token_hash)
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
        """ENQUEUE_JOBS; with idempotency keys, in a transaction with the read-back of the keys taken."""
        if not keyed:
            # One statement inserts and wakes the workers (autocommit, or at the caller's commit);
            # without keys nothing conflicts, so there is nothing to read back.
            params = self._enqueue_params(jobs, ids, False, token_hash)
            if caller is None:
                row = self._fetchall(ENQUEUE_JOBS, params)[0]  # an aggregate answers one row
            else:
                with translate_errors(), caller.cursor(row_factory=dict_row) as cursor:
                    row = cursor.execute(ENQUEUE_JOBS, params).fetchall()[0]
            return _queued(row, jobs, ids, token_hash)[1]

        # A key may be taken, and then its job must be this very request (checks.keyed_job): the
        # insert, the read-back and the comparison share one transaction, so a refused batch
        # writes nothing (a savepoint in the caller's transaction, which goes on). Pipelined,
        # BEGIN rides with the insert: a batch whose keys are all new costs two round trips.
        def run(conn: psycopg.Connection[Any]) -> list[JobStatus]:
            with conn.pipeline(), conn.transaction(), conn.cursor(row_factory=dict_row) as cursor:
                return self._insert_keyed(cursor, jobs, ids, token_hash)

        if caller is None:

            def pooled() -> list[JobStatus]:
                with self._connection() as conn:
                    return run(conn)

            # Every job carries a key: run again after a lost connection, a job that did land is
            # read back by its key (this very request), not stored twice.
            return self._retrying(pooled, replay=all(job.idempotency_key is not None for job in jobs))
        with translate_errors():
            return run(caller)

    def _insert_keyed(
        self,
        cursor: psycopg.Cursor[dict[str, Any]],
        jobs: Sequence[NewJob],
        ids: list[uuid.UUID],
        token_hash: str | None,
    ) -> list[JobStatus]:
        """ENQUEUE_JOBS; for each key already taken, READ_BY_IDEMPOTENCY_KEYS's job, which must be
        this very request (its payload read with GET_PAYLOAD, on the same transaction). The read
        sees that job: the insert waited for any transaction that held the key, and one inserted
        earlier in this transaction (the caller's, or the same batch) is its own."""
        row = cursor.execute(ENQUEUE_JOBS, self._enqueue_params(jobs, ids, True, token_hash)).fetchall()[0]
        jobs, statuses = _queued(row, jobs, ids, token_hash)
        if row["inserted"] == len(jobs):
            return statuses
        inserted = set(row["ids"] or ())
        taken = [i for i, job_id in enumerate(ids) if job_id not in inserted]
        cursor.execute(
            READ_BY_IDEMPOTENCY_KEYS,
            self._params(tenants=[jobs[i].tenant for i in taken], keys=[jobs[i].idempotency_key for i in taken]),
        )
        existing = {(r["tenant"], r["idempotency_key"]): status(r) for r in cursor.fetchall()}
        found = [i for i in taken if (jobs[i].tenant, jobs[i].idempotency_key) in existing]
        stored = [existing[(jobs[i].tenant, jobs[i].idempotency_key)] for i in found]
        for i, job, payload in zip(found, stored, _payloads(cursor, stored), strict=True):
            statuses[i] = checks.keyed_job(jobs[i], job, payload)
        # A key's job deleted between the insert and the read (the pruner's, committed in between)
        # left its key free: as a moment later, the job is inserted anew (its tenant is known now).
        gone = [i for i in taken if (jobs[i].tenant, jobs[i].idempotency_key) not in existing]
        if gone:
            again = self._insert_keyed(cursor, [jobs[i] for i in gone], [ids[i] for i in gone], None)
            for i, again_status in zip(gone, again, strict=True):
                statuses[i] = again_status
        return statuses

    def _enqueue_params(
        self, jobs: Sequence[NewJob], ids: list[uuid.UUID], keyed: bool, token_hash: str | None
    ) -> dict[str, Any]:
        batch = checks.enqueue_rows(jobs, ids, payloads=lambda values: values, time=datetime.isoformat)
        return self._params(
            batch=dump_payload_batch(batch, [job.payload for job in jobs], self.max_payload_bytes),
            keyed=keyed,
            wake_queues=_wake_queues(jobs),
            token_hash=token_hash,
        )

    def _copy(
        self, jobs: Sequence[NewJob], ids: list[uuid.UUID], caller: psycopg.Connection[Any] | None
    ) -> list[JobStatus]:
        """COPY_BATCH_CLOCK and COPY_JOBS in one transaction (the caller's, or one of their own)."""
        validate_new_jobs(jobs)
        payloads = dump_payloads([job.payload for job in jobs], self.max_payload_bytes)
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


def _queued(
    row: Mapping[str, Any], jobs: Sequence[NewJob], ids: list[uuid.UUID], token_hash: str | None
) -> tuple[Sequence[NewJob], list[JobStatus]]:
    """The jobs as ENQUEUE_JOBS's summary row stored them (in the token's tenant, with a
    ``token_hash``: nothing was written for no token), and their statuses as queued."""
    if token_hash is not None:
        tenant = checks.token_scope(row["token_tenant"])
        jobs = [replace(job, tenant=tenant) for job in jobs]
    created_at = row["created_at"]
    later = dict(zip(row["later_ids"] or (), row["later_run_after"] or (), strict=True))
    return jobs, queued_statuses(jobs, ids, [later.get(job_id, created_at) for job_id in ids], created_at)


def _payloads(cursor: psycopg.Cursor[dict[str, Any]], stored: Sequence[JobStatus]) -> list[JSON]:
    """The stored jobs' payloads, GET_PAYLOAD each, sent together (one round trip in a pipeline)."""
    if not stored:
        return []
    cursor.executemany(GET_PAYLOAD, [{"job_id": job.id, "tenant": job.tenant} for job in stored], returning=True)
    payloads = []
    for job in stored:
        payloads.append(checks.found(cursor.fetchone(), job.id)["payload"])
        cursor.nextset()
    return payloads


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
