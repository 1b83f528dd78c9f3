"""Submitting jobs to PostgreSQL: ENQUEUE_JOBS (one statement for a batch) and the
idempotency keys' read-back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row

from service.jobs import JobStatus, NewJob, new_job_id, queued_status
from service.payloads import dump_batch, storable_json
from service.store import checks
from service.store.postgres.caller import caller_connection
from service.store.postgres.connection import Connected, status
from service.store.postgres.errors import translate_errors
from service.store.postgres.limits import tenant_counters
from service.store.postgres.queries import STATUS_COLUMNS

# -- enqueue_jobs --
# Many jobs in one statement: the batch is one jsonb parameter, so psycopg dumps
# one string (not twelve arrays element by element) and the plan does not depend
# on the batch's length. A tenant's idempotency key that is already taken inserts
# nothing: the existing job is read back by READ_BY_IDEMPOTENCY_KEYS. The caller
# made the ids (time-ordered, in batch order), so one row comes back whatever the
# batch's size: the database's clock, how many rows went in, the ids that went in
# when the batch has keys (``keyed``; without keys every row goes in or none),
# and the run_after of the jobs not due at once. Everything else in a new job's
# status is what was inserted. The wake-up for idle workers rides in the same
# statement (one round trip, one commit): one JOBS_QUEUED notification per
# statement, never per row, delivered at commit; none when nothing was inserted.
# The API's submit passes its caller's token_hash: the jobs then go to the token's
# tenant, looked up here (the unique index on the hash) and in force at this
# statement's snapshot, so a revoked token inserts nothing from the revoke's commit
# on; token_tenant in the answer is NULL for an unknown, revoked or admin token.
# Without a token_hash (the library, the CLI) each job's own tenant is taken.
ENQUEUE_JOBS = (
    """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
token AS (
    SELECT tenant FROM api_tokens
    WHERE token_hash = %(token_hash)s AND revoked_at IS NULL AND NOT admin
),
inserted AS (
INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                  max_attempts_default, done, total, run_after, concurrency_key, idempotency_key,
                  created_at, updated_at)
SELECT i.id, coalesce(t.tenant, i.tenant), i.queue, i.kind, i.payload, 'queued', i.priority, 0, i.max_attempts,
       i.max_attempts_default, 0, i.total, coalesce(i.run_after, n.ts + make_interval(secs => i.delay)),
       i.concurrency_key, i.idempotency_key, n.ts, n.ts
FROM jsonb_to_recordset(%(batch)s::jsonb)
     AS i(id uuid, tenant text, queue text, kind text, payload jsonb, priority int, max_attempts int,
          max_attempts_default boolean, delay float8, run_after timestamptz, total int, concurrency_key text, idempotency_key text)
     CROSS JOIN n
     LEFT JOIN token AS t ON true
WHERE %(token_hash)s::text IS NULL OR t.tenant IS NOT NULL
ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, tenant, run_after, created_at
),"""
    + tenant_counters("inserted")
    + """
SELECT (SELECT ts FROM n) AS created_at,
       (SELECT tenant FROM token) AS token_tenant,
       count(*) AS inserted,
       CASE WHEN %(keyed)s THEN array_agg(id) END AS ids,
       array_agg(id) FILTER (WHERE run_after <> created_at) AS later_ids,
       array_agg(run_after) FILTER (WHERE run_after <> created_at) AS later_run_after,
       CASE WHEN %(notify)s AND count(*) > 0 THEN pg_notify('jobq_jobs', %(wake_queues)s) END AS woke
FROM inserted
"""
)


READ_BY_IDEMPOTENCY_KEYS = (
    """
SELECT """
    + STATUS_COLUMNS
    + """
FROM jobs j
WHERE (j.tenant, j.idempotency_key) IN (
    SELECT * FROM unnest(%(tenants)s::text[], %(keys)s::text[])
)
"""
)


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
        ids = [new_job_id() for _ in jobs]
        batch = checks.enqueue_rows(
            jobs, ids, payload=lambda value: storable_json(value, "payload"), time=datetime.isoformat
        )
        keyed = any(job.idempotency_key is not None for job in jobs)
        params = self._params(
            batch=dump_batch(batch, [job.payload for job in jobs], "payload"),
            keyed=keyed,
            wake_queues=",".join(sorted({j.queue for j in jobs})),
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
        inserted = set(row["ids"] or ()) if keyed else None
        existing: dict[tuple[str, str], JobStatus] = {}
        if row["inserted"] < len(jobs):
            taken = [j for j in jobs if j.idempotency_key is not None]
            rows = fetch(
                READ_BY_IDEMPOTENCY_KEYS,
                self._params(tenants=[j.tenant for j in taken], keys=[j.idempotency_key for j in taken]),
            )
            existing = {(r["tenant"], r["idempotency_key"]): status(r) for r in rows}
        statuses = []
        for job_id, job in zip(ids, jobs, strict=True):
            if inserted is not None and job_id not in inserted:
                statuses.append(existing[(job.tenant, job.idempotency_key)])  # type: ignore[index]
            else:
                statuses.append(
                    queued_status(job, job_id, run_after=later.get(job_id, created_at), created_at=created_at)
                )
        return statuses
