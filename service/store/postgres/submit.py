"""Submitting jobs to PostgreSQL: ENQUEUE_JOBS (one statement for a batch), COPY_JOBS (a
large batch without idempotency keys) and the idempotency keys' read-back and check."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from service.jobs import JobStatus, NewJob, new_job_ids, queued_statuses, stored_max_attempts
from service.payloads import dump_payload_batch, dump_payloads, validate_new_jobs
from service.store import checks
from service.store.postgres.caller import async_caller_connection, caller_connection
from service.store.postgres.connection import status
from service.store.postgres.errors import translate_errors
from service.store.postgres.queries import payload_steps
from service.store.postgres.steps import Copy, Plan, Query, Steps, run, run_async
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


class Submitting(Workflows):
    """enqueue and enqueue_many, on the store's pool or the caller's connection (sync or async):
    one plan of steps each (:mod:`.steps`), chosen by :meth:`_plan`."""

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
        plan, replay = self._plan(jobs, token_hash)
        if caller is not None:
            with translate_errors():
                return run(caller, plan(), caller=True)

        def pooled() -> list[JobStatus]:
            with self._connection() as conn:
                return run(conn, plan(), caller=False)

        return self._retrying(pooled, replay=replay)

    async def enqueue_many_async(self, jobs: Sequence[NewJob], *, connection: object) -> list[JobStatus]:
        """``enqueue_many`` in the caller's transaction on its AsyncConnection (psycopg's, or
        SQLAlchemy's AsyncConnection/AsyncSession on psycopg): the same plan, awaited."""
        if not jobs:
            return []
        caller = await async_caller_connection(connection)
        plan, _ = self._plan(jobs, None)
        with translate_errors():
            return await run_async(caller, plan())

    def _plan(self, jobs: Sequence[NewJob], token_hash: str | None) -> tuple[Callable[[], Plan], bool]:
        """The batch's plan (made anew for each run: a retry starts over), and whether a run that
        broke under a lost connection may run again (every job keyed: one that did land is read
        back by its key, this very request, not stored twice)."""
        if has_parents(jobs):  # a workflow's batch: its own path, so a plain batch pays nothing for it
            return (lambda: Plan(self._dependent_steps(jobs, token_hash), atomic=True)), False
        ids = new_job_ids(len(jobs))
        if any(job.idempotency_key is not None for job in jobs):
            # A key may be taken, and then its job must be this very request (checks.keyed_job): the
            # insert, the read-back and the comparison share one transaction, so a refused batch
            # writes nothing (a savepoint in the caller's transaction, which goes on). Pipelined,
            # BEGIN rides with the insert: a batch whose keys are all new costs two round trips.
            def keyed() -> Plan:
                return Plan(self._keyed_steps(jobs, ids, token_hash), atomic=True, pipelined=True)

            return keyed, all(job.idempotency_key is not None for job in jobs)
        # COPY checks no token: an API batch (a token_hash) is one statement whatever its size.
        if token_hash is not None or len(jobs) < COPY_FROM_JOBS:
            # One statement inserts and wakes the workers (autocommit, or at the caller's commit);
            # without keys nothing conflicts, so there is nothing to read back.
            return (lambda: Plan(self._plain_steps(jobs, ids, token_hash), atomic=False)), False
        return (lambda: Plan(self._copy_steps(jobs, ids), atomic=True)), False

    def _plain_steps(self, jobs: Sequence[NewJob], ids: list[uuid.UUID], token_hash: str | None) -> Steps:
        """ENQUEUE_JOBS, one statement."""
        [row] = yield Query(ENQUEUE_JOBS, self._enqueue_params(jobs, ids, False, token_hash))  # an aggregate: one row
        return _queued(row, jobs, ids, token_hash)[1]

    def _keyed_steps(self, jobs: Sequence[NewJob], ids: list[uuid.UUID], token_hash: str | None) -> Steps:
        """ENQUEUE_JOBS; for each key already taken, READ_BY_IDEMPOTENCY_KEYS's job, which must be
        this very request (its payload read with GET_PAYLOAD, on the same transaction). The read
        sees that job: the insert waited for any transaction that held the key, and one inserted
        earlier in this transaction (the caller's, or the same batch) is its own."""
        [row] = yield Query(ENQUEUE_JOBS, self._enqueue_params(jobs, ids, True, token_hash))
        jobs, statuses = _queued(row, jobs, ids, token_hash)
        if row["inserted"] == len(jobs):
            return statuses
        inserted = set(row["ids"] or ())
        taken = [i for i, job_id in enumerate(ids) if job_id not in inserted]
        rows = yield Query(
            READ_BY_IDEMPOTENCY_KEYS,
            self._params(tenants=[jobs[i].tenant for i in taken], keys=[jobs[i].idempotency_key for i in taken]),
        )
        existing = {(r["tenant"], r["idempotency_key"]): status(r) for r in rows}
        found = [i for i in taken if (jobs[i].tenant, jobs[i].idempotency_key) in existing]
        stored = [existing[(jobs[i].tenant, jobs[i].idempotency_key)] for i in found]
        payloads = yield from payload_steps(stored)
        for i, job, payload in zip(found, stored, payloads, strict=True):
            statuses[i] = checks.keyed_job(jobs[i], job, payload)
        # A key's job deleted between the insert and the read (the pruner's, committed in between)
        # left its key free: as a moment later, the job is inserted anew (its tenant is known now).
        gone = [i for i in taken if (jobs[i].tenant, jobs[i].idempotency_key) not in existing]
        if gone:
            again = yield from self._keyed_steps([jobs[i] for i in gone], [ids[i] for i in gone], None)
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

    def _copy_steps(self, jobs: Sequence[NewJob], ids: list[uuid.UUID]) -> Steps:
        """COPY_BATCH_CLOCK and COPY_JOBS, in one transaction (the plan is atomic)."""
        validate_new_jobs(jobs)
        payloads = dump_payloads([job.payload for job in jobs], self.max_payload_bytes)
        params = self._params(tenants=sorted({job.tenant for job in jobs}), wake_queues=_wake_queues(jobs))
        [clock] = yield Query(COPY_BATCH_CLOCK, params)
        created_at: datetime = clock["created_at"]
        run_after = [_run_after(job, created_at) for job in jobs]
        rows = (
            # COPY_JOBS_COLUMNS, in order
            (job_id, job.tenant, job.queue, job.kind, payload, "queued", job.priority, 0, stored_max_attempts(job),
             job.max_attempts is None, 0, job.total, due, job.concurrency_key, created_at, created_at)
            for job_id, job, payload, due in zip(ids, jobs, payloads, run_after, strict=True)
        )  # fmt: skip
        yield Copy(COPY_JOBS, [kind for _, kind in COPY_JOBS_COLUMNS], rows)
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
