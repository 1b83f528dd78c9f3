"""Submitting jobs to SQLite: ENQUEUE_JOBS per job in one write transaction, and the
idempotency keys' read-back and check."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from service.errors import InvalidInput
from service.jobs import JobStatus, NewJob, new_job_id
from service.payloads import dump_json
from service.store import checks
from service.store.sqlite.connection import Connected, status
from service.store.sqlite.queries import GET_PAYLOAD, STATUS_COLUMNS, TENANT_FOR_TOKEN
from service.store.sqlite.statements import TENANT_COUNTER
from service.store.sqlite.timestamps import to_text

# -- enqueue_jobs --
# A tenant's idempotency key that is already taken inserts nothing; the caller
# then reads the existing job with READ_BY_IDEMPOTENCY_KEYS.
ENQUEUE_JOBS = (
    """
INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                  max_attempts_default, done, total, run_after, concurrency_key, idempotency_key,
                  created_at, updated_at)
VALUES (:id, :tenant, :queue, :kind, :payload, 'queued', :priority, 0, :max_attempts,
        :max_attempts_default, 0, :total, coalesce(:run_after, strftime('%Y-%m-%d %H:%M:%f', :now, :delay || ' seconds')),
        :concurrency_key, :idempotency_key, :now, :now)
ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING """
    + STATUS_COLUMNS
)


READ_BY_IDEMPOTENCY_KEYS = (
    """
SELECT """
    + STATUS_COLUMNS
    + """
FROM jobs WHERE tenant = :tenant AND idempotency_key = :idempotency_key
"""
)


class Submitting(Connected):
    """enqueue and enqueue_many."""

    def enqueue(self, job: NewJob, *, connection: object | None = None, token_hash: str | None = None) -> JobStatus:
        return self.enqueue_many([job], connection=connection, token_hash=token_hash)[0]

    def enqueue_many(
        self, jobs: Sequence[NewJob], *, connection: object | None = None, token_hash: str | None = None
    ) -> list[JobStatus]:
        if connection is not None:
            raise InvalidInput(
                "an enqueue inside the caller's transaction (connection=) needs PostgreSQL; "
                "on SQLite the Queue commits each enqueue itself"
            )
        ids = [new_job_id() for _ in jobs]
        rows = checks.enqueue_rows(jobs, ids, payload=lambda value: dump_json(value, "payload"), time=to_text)
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
