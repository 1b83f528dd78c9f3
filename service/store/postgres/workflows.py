"""Workflows on PostgreSQL (service.workflows): enqueueing a batch with dependencies, settling
the dependents of a job that failed or was cancelled, re-arming them on replay, and the reads
(parent results, dependencies). A parent's completion releases its children inside
COMPLETE_JOBS itself (sql/statements.sql)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from service.errors import IdempotencyConflict
from service.jobs import JobState, JobStatus, NewJob, new_job_ids
from service.payloads import dump_payload_batch
from service.store import checks
from service.store.postgres.connection import Connected, status
from service.store.postgres.errors import translate_errors
from service.store.postgres.queries import GET_JOB, GET_PAYLOAD
from service.store.sqlfiles import statements
from service.workflows import (
    HELD_UNTIL,
    Dependencies,
    ParentResult,
    RearmCandidate,
    StoredParent,
    check_page,
    dependencies_page,
    rearm,
    stored_parent_ids,
    wire,
)

_SQL = statements("postgres")

LOCK_PARENTS = _SQL["lock_parents"]
OPEN_TRANSACTION = _SQL["open_transaction"]
ENQUEUE_DEPENDENTS = _SQL["enqueue_dependents"]
READ_JOBS = _SQL["read_jobs"]
LOCK_JOBS = _SQL["lock_jobs"]
SETTLE_DEPENDENTS = _SQL["settle_dependents"]
REARM_CANDIDATES = _SQL["rearm_candidates"]
REARM_JOBS = _SQL["rearm_jobs"]
PARENT_RESULTS = _SQL["parent_results"]
JOB_PARENTS = _SQL["job_parents"]
JOB_CHILDREN = _SQL["job_children"]
UNFINISHED_PARENTS = _SQL["unfinished_parents"]
TENANT_FOR_TOKEN = _SQL["tenant_for_token"]
READ_BY_IDEMPOTENCY_KEYS = _SQL["read_by_idempotency_keys"]

HELD_UNTIL_PG = HELD_UNTIL + "+00"


class Workflows(Connected):
    """The workflow operations and the pieces the other areas run in their transactions."""

    def _enqueue_dependents(
        self,
        jobs: Sequence[NewJob],
        caller: psycopg.Connection[Any] | None,
        token_hash: str | None,
    ) -> list[JobStatus]:
        """A batch with dependencies, all or none, in one transaction (the caller's, as a savepoint):
        the stored parents locked (LOCK_PARENTS), the batch wired (service.workflows.wire), the
        jobs and edges inserted (ENQUEUE_DEPENDENTS), their statuses read back."""

        def run(conn: psycopg.Connection[Any]) -> list[JobStatus]:
            with conn.transaction(), conn.cursor(row_factory=dict_row) as cursor:
                return self._insert_dependents(cursor, jobs, token_hash)

        if caller is None:

            def pooled() -> list[JobStatus]:
                with self._connection() as conn:
                    return run(conn)

            return self._retrying(pooled)
        with translate_errors():
            if not caller.autocommit and caller.info.transaction_status == TransactionStatus.IDLE:
                caller.execute(OPEN_TRANSACTION)
            return run(caller)

    def _insert_dependents(
        self, cursor: psycopg.Cursor[dict[str, Any]], jobs: Sequence[NewJob], token_hash: str | None
    ) -> list[JobStatus]:
        """The batch's statements, in the transaction the cursor's connection has open."""
        ids = new_job_ids(len(jobs))
        if token_hash is not None:
            row = cursor.execute(TENANT_FOR_TOKEN, {"token_hash": token_hash}).fetchone()
            tenant = checks.token_scope(row["tenant"] if row is not None else None)
            jobs = [replace(job, tenant=tenant) for job in jobs]
        stored = self._lock_parents(cursor, stored_parent_ids(jobs))
        wirings = wire(jobs, ids, stored)  # refuses before anything is inserted
        taken = self._taken_keys(cursor, jobs)
        if taken is not None:
            return taken
        rows = checks.enqueue_rows(jobs, ids, payloads=lambda values: values, time=lambda t: t.isoformat())
        for row, job, wiring in zip(rows, jobs, wirings, strict=True):
            row.update(
                state=wiring.state.value,
                error=wiring.error,
                cancelled_by=None if wiring.cancelled_by is None else str(wiring.cancelled_by),
                parents_total=len(wiring.parents),
                parents_pending=wiring.pending,
                on_parent_failure=job.on_parent_failure,
                dependents_version=int(wiring.has_children),
            )
        edges = [
            {"parent": str(parent), "child": str(child)}
            for child, wiring in zip(ids, wirings, strict=True)
            for parent in wiring.parents
        ]
        cursor.execute(
            ENQUEUE_DEPENDENTS,
            self._params(
                batch=dump_payload_batch(rows, [job.payload for job in jobs], self.max_payload_bytes),
                edges=json.dumps(edges),
                held_until=HELD_UNTIL_PG,
                wake_queues=",".join(sorted({job.queue for job in jobs})),
            ),
        )
        found = {r["id"]: status(r) for r in cursor.execute(READ_JOBS, self._params(ids=ids)).fetchall()}
        return [found[job_id] for job_id in ids]

    def _lock_parents(
        self, cursor: psycopg.Cursor[dict[str, Any]], parent_ids: list[uuid.UUID]
    ) -> dict[uuid.UUID, StoredParent]:
        if not parent_ids:
            return {}
        rows = cursor.execute(LOCK_PARENTS, self._params(ids=parent_ids)).fetchall()
        return {
            row["id"]: StoredParent(row["id"], row["tenant"], JobState(row["state"]), row["cancelled_by"])
            for row in rows
        }

    def _taken_keys(self, cursor: psycopg.Cursor[dict[str, Any]], jobs: Sequence[NewJob]) -> list[JobStatus] | None:
        """A batch with dependencies sent again under the same idempotency keys: the stored jobs
        (each checked to be this very request), or None when no key is taken. A batch whose keys
        are taken in part is refused: its edges would name jobs of two submissions."""
        keyed = [job for job in jobs if job.idempotency_key is not None]
        if not keyed:
            return None
        rows = cursor.execute(
            READ_BY_IDEMPOTENCY_KEYS,
            self._params(tenants=[job.tenant for job in keyed], keys=[job.idempotency_key for job in keyed]),
        ).fetchall()
        if not rows:
            return None
        existing = {(r["tenant"], r["idempotency_key"]): status(r) for r in rows}
        if len(existing) != len(jobs):
            raise IdempotencyConflict(
                "a batch with dependencies is stored whole or not at all: some of its idempotency keys are "
                "taken and some are not (or some of its jobs have none)"
            )
        answer = []
        for job in jobs:
            stored = existing[(job.tenant, job.idempotency_key)]
            payload = cursor.execute(GET_PAYLOAD, {"job_id": stored.id, "tenant": stored.tenant}).fetchone()
            answer.append(checks.keyed_job(job, stored, checks.found(payload, stored.id)["payload"]))
        return answer

    # -- settling, in the transaction that ended the parents ---------------------------
    def _settle_params(self, ids: Sequence[uuid.UUID]) -> dict[str, Any]:
        return self._params(ids=list(ids))

    def _rearm(self, conn: psycopg.Connection[Any], ids: Sequence[uuid.UUID], by: str) -> list[uuid.UUID]:
        """Replay's second step, in its transaction: REARM_CANDIDATES (their parents locked),
        service.workflows.rearm decides, REARM_JOBS writes and records."""
        if not ids:
            return []
        rows = conn.execute(REARM_CANDIDATES, self._params(ids=list(ids))).fetchall()
        chosen = rearm([_candidate(row) for row in rows])
        if not chosen:
            return []
        batch = json.dumps([{"id": str(job_id), "pending": pending} for job_id, pending in chosen.items()])
        written = conn.execute(REARM_JOBS, self._params(batch=batch, by=by, held_until=HELD_UNTIL_PG))
        return [row["id"] for row in written.fetchall()]

    # -- reads -----------------------------------------------------------------------------
    def parent_results(self, job_id: uuid.UUID) -> list[ParentResult]:
        rows = self._fetchall(PARENT_RESULTS, self._params(job_id=job_id))
        return [ParentResult(row["id"], JobState(row["state"]), row["body"]) for row in rows]

    def dependencies(
        self,
        job_id: uuid.UUID,
        tenant: str | None = None,
        *,
        limit: int = 100,
        parents_after: uuid.UUID | None = None,
        children_after: uuid.UUID | None = None,
    ) -> Dependencies:
        check_page(limit)
        checks.found(self._fetchone(GET_JOB, self._params(job_id=job_id, tenant=tenant)), job_id)
        parents = self._fetchall(JOB_PARENTS, self._params(job_id=job_id, after=parents_after, limit=limit + 1))
        children = self._fetchall(JOB_CHILDREN, self._params(job_id=job_id, after=children_after, limit=limit + 1))
        return dependencies_page(parents, children, limit)


def _candidate(row: dict[str, Any]) -> RearmCandidate:
    return RearmCandidate(
        id=row["id"],
        state=JobState(row["state"]),
        on_parent_failure=row["on_parent_failure"],
        parents=tuple((uuid.UUID(p["id"]), JobState(p["state"])) for p in row["parents"]),
    )
