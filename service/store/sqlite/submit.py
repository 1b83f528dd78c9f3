"""Submitting jobs to SQLite: ENQUEUE_JOBS per job in one write transaction, and the
idempotency keys' read-back and check."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from service.errors import InvalidInput
from service.jobs import JobStatus, NewJob, new_job_id
from service.payloads import dump_payloads
from service.store import checks
from service.store.sqlfiles import statements
from service.store.sqlite.connection import status
from service.store.sqlite.queries import GET_PAYLOAD, TENANT_FOR_TOKEN
from service.store.sqlite.statements import TENANT_COUNTER
from service.store.sqlite.timestamps import to_text
from service.store.sqlite.workflows import Workflows
from service.workflows import has_parents

_SQL = statements("sqlite")

ENQUEUE_JOBS = _SQL["enqueue_jobs"]
READ_BY_IDEMPOTENCY_KEYS = _SQL["read_by_idempotency_keys"]


def _no_caller_connection() -> InvalidInput:
    return InvalidInput(
        "an enqueue inside the caller's transaction (connection=) needs PostgreSQL; "
        "on SQLite the Queue commits each enqueue itself"
    )


class Submitting(Workflows):
    """enqueue and enqueue_many."""

    async def enqueue_many_async(self, jobs: Sequence[NewJob], *, connection: object) -> list[JobStatus]:
        raise _no_caller_connection()

    def enqueue(self, job: NewJob, *, connection: object | None = None, token_hash: str | None = None) -> JobStatus:
        return self.enqueue_many([job], connection=connection, token_hash=token_hash)[0]

    def enqueue_many(
        self, jobs: Sequence[NewJob], *, connection: object | None = None, token_hash: str | None = None
    ) -> list[JobStatus]:
        if connection is not None:
            raise _no_caller_connection()
        if has_parents(jobs):  # a workflow's batch: its own path, so a plain batch pays nothing for it
            return self._enqueue_dependents(jobs, token_hash)
        ids = [new_job_id() for _ in jobs]
        rows = checks.enqueue_rows(
            jobs, ids, payloads=lambda values: dump_payloads(values, self.max_payload_bytes), time=to_text
        )
        statuses = []
        with self._write() as (conn, now):
            if token_hash is not None:  # the token's tenant, read in the write transaction that inserts
                token = conn.execute(TENANT_FOR_TOKEN, {"token_hash": token_hash}).fetchone()
                tenant = checks.token_scope(token["tenant"] if token is not None else None)
                rows = [{**row, "tenant": tenant} for row in rows]
                jobs = [replace(job, tenant=tenant) for job in jobs]
            for job, row in zip(jobs, rows, strict=True):
                inserted = conn.execute(ENQUEUE_JOBS, {**row, "now": now}).fetchone()
                if inserted is not None:
                    statuses.append(status(inserted))
                    continue
                # The key is taken (no pruner can delete its job inside this write transaction):
                # its job must be this very request, or the transaction rolls back, all or none.
                stored = status(conn.execute(READ_BY_IDEMPOTENCY_KEYS, {**row, "now": now}).fetchone())
                payload = conn.execute(GET_PAYLOAD, {"job_id": str(stored.id), "tenant": stored.tenant}).fetchone()
                statuses.append(checks.keyed_job(job, stored, json.loads(checks.found(payload, stored.id)["payload"])))
            for tenant in sorted({job.tenant for job in jobs}):
                conn.execute(TENANT_COUNTER, {"tenant": tenant})
        return statuses
