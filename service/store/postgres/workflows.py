"""Workflows on PostgreSQL (service.workflows): enqueueing a batch with dependencies, settling
the dependents of a job that failed or was cancelled, re-arming them on replay, and the reads
(parent results, dependencies). A parent's completion releases its children inside
COMPLETE_JOBS itself (sql/statements.sql)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Generator, Sequence
from dataclasses import replace
from typing import Any

import psycopg

from service.errors import IdempotencyConflict
from service.jobs import JobState, JobStatus, NewJob, new_job_ids
from service.payloads import dump_payload_batch
from service.store import checks
from service.store.postgres.connection import Connected, status
from service.store.postgres.queries import GET_JOB, payload_steps
from service.store.postgres.steps import Query, Step, Steps
from service.store.sqlfiles import statements
from service.workflows import (
    Dependencies,
    ParentResult,
    RearmCandidate,
    StoredParent,
    WorkflowProgress,
    check_page,
    dependencies_page,
    rearm,
    still_cancelled,
    stored_parent_ids,
    wire,
    workflow_ids,
    workflow_progress,
)

_SQL = statements("postgres")

LOCK_PARENTS = _SQL["lock_parents"]
ENQUEUE_DEPENDENTS = _SQL["enqueue_dependents"]
READ_JOBS = _SQL["read_jobs"]
LOCK_JOBS = _SQL["lock_jobs"]
SETTLE_DEPENDENTS = _SQL["settle_dependents"]
REARM_CANDIDATES = _SQL["rearm_candidates"]
REARM_JOBS = _SQL["rearm_jobs"]
HOLD_CANCELLED = _SQL["hold_cancelled"]
PARENT_RESULTS = _SQL["parent_results"]
JOB_PARENTS = _SQL["job_parents"]
JOB_CHILDREN = _SQL["job_children"]
UNFINISHED_PARENTS = _SQL["unfinished_parents"]
WORKFLOW_PROGRESS = _SQL["workflow_progress"]
TENANT_FOR_TOKEN = _SQL["tenant_for_token"]
READ_BY_IDEMPOTENCY_KEYS = _SQL["read_by_idempotency_keys"]


class Workflows(Connected):
    """The workflow operations and the pieces the other areas run in their transactions."""

    def _dependent_steps(
        self, jobs: Sequence[NewJob], token_hash: str | None, spawner: uuid.UUID | None = None
    ) -> Steps:
        """A batch with dependencies, all or none (the plan is atomic: a transaction, or a savepoint
        in the caller's): the stored parents locked (LOCK_PARENTS), the batch wired
        (service.workflows.wire) and placed in workflows (workflow_ids; ``spawner``: the job
        whose handler enqueued them, locked with the parents), the jobs and edges inserted
        (ENQUEUE_DEPENDENTS), their statuses read back."""
        ids = new_job_ids(len(jobs))
        if token_hash is not None:
            rows = yield Query(TENANT_FOR_TOKEN, {"token_hash": token_hash})
            tenant = checks.token_scope(rows[0]["tenant"] if rows else None)
            jobs = [replace(job, tenant=tenant) for job in jobs]
        parent_ids = stored_parent_ids(jobs)
        stored = yield from self._lock_parents(sorted({*parent_ids, spawner}) if spawner else parent_ids)
        wirings = wire(jobs, ids, stored)  # refuses before anything is inserted
        workflows = workflow_ids(jobs, ids, stored, spawner)
        taken = yield from self._taken_keys(jobs)
        if taken is not None:
            return taken
        rows = checks.enqueue_rows(jobs, ids, payloads=lambda values: values, time=lambda t: t.isoformat())
        for row, job, wiring, workflow in zip(rows, jobs, wirings, workflows.jobs, strict=True):
            row.update(
                state=wiring.state.value,
                error=wiring.error,
                cancelled_by=None if wiring.cancelled_by is None else str(wiring.cancelled_by),
                parents_total=len(wiring.parents),
                parents_pending=wiring.pending,
                on_parent_failure=job.on_parent_failure,
                dependents_version=int(wiring.has_children),
                workflow_id=None if workflow is None else str(workflow),
            )
        edges = [
            {"parent": str(parent), "child": str(child)}
            for child, wiring in zip(ids, wirings, strict=True)
            for parent in wiring.parents
        ]
        yield Query(
            ENQUEUE_DEPENDENTS,
            self._params(
                batch=dump_payload_batch(rows, [job.payload for job in jobs], self.max_payload_bytes),
                edges=json.dumps(edges),
                joined_ids=list(workflows.joined),
                joined_workflows=list(workflows.joined.values()),
                wake_queues=",".join(sorted({job.queue for job in jobs})),
            ),
        )
        found = {r["id"]: status(r) for r in (yield Query(READ_JOBS, self._params(ids=ids)))}
        return [found[job_id] for job_id in ids]

    def _lock_parents(self, parent_ids: list[uuid.UUID]) -> Generator[Step, list[Any], dict[uuid.UUID, StoredParent]]:
        if not parent_ids:
            return {}
        rows = yield Query(LOCK_PARENTS, self._params(ids=parent_ids))
        return {
            row["id"]: StoredParent(
                row["id"], row["tenant"], JobState(row["state"]), row["cancelled_by"], row["workflow_id"]
            )
            for row in rows
        }

    def _taken_keys(self, jobs: Sequence[NewJob]) -> Generator[Step, list[Any], list[JobStatus] | None]:
        """A batch with dependencies sent again under the same idempotency keys: the stored jobs
        (each checked to be this very request), or None when no key is taken. A batch whose keys
        are taken in part is refused: its edges would name jobs of two submissions."""
        keyed = [job for job in jobs if job.idempotency_key is not None]
        if not keyed:
            return None
        rows = yield Query(
            READ_BY_IDEMPOTENCY_KEYS,
            self._params(tenants=[job.tenant for job in keyed], keys=[job.idempotency_key for job in keyed]),
        )
        if not rows:
            return None
        existing = {(r["tenant"], r["idempotency_key"]): status(r) for r in rows}
        if len(existing) != len(jobs):
            raise IdempotencyConflict(
                "a batch with dependencies is stored whole or not at all: some of its idempotency keys are "
                "taken and some are not (or some of its jobs have none)"
            )
        stored = [existing[(job.tenant, job.idempotency_key)] for job in jobs]
        payloads = yield from payload_steps(stored)
        return [
            checks.keyed_job(job, found, payload) for job, found, payload in zip(jobs, stored, payloads, strict=True)
        ]

    # -- settling, in the transaction that ended the parents ---------------------------
    def _settle_params(self, ids: Sequence[uuid.UUID]) -> dict[str, Any]:
        return self._params(ids=list(ids))

    def _rearm(self, conn: psycopg.Connection[Any], ids: Sequence[uuid.UUID], by: str) -> list[uuid.UUID]:
        """Replay's second step, in its transaction: REARM_CANDIDATES (their parents locked),
        service.workflows.rearm decides, REARM_JOBS writes and records; HOLD_CANCELLED points
        the candidates left cancelled at the parent that holds them now (still_cancelled)."""
        if not ids:
            return []
        rows = conn.execute(REARM_CANDIDATES, self._params(ids=list(ids))).fetchall()
        candidates = [_candidate(row) for row in rows]
        chosen = rearm(candidates)
        held = still_cancelled(candidates, chosen)
        if held:
            holds = [{"id": str(h.id), "error": h.error, "cancelled_by": str(h.cancelled_by)} for h in held]
            conn.execute(HOLD_CANCELLED, self._params(batch=json.dumps(holds)))
        if not chosen:
            return []
        batch = json.dumps([{"id": str(job_id), "pending": pending} for job_id, pending in chosen.items()])
        written = conn.execute(REARM_JOBS, self._params(batch=batch, by=by))
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
        job = checks.found(self._fetchone(GET_JOB, self._params(job_id=job_id, tenant=tenant)), job_id)
        parents = self._fetchall(JOB_PARENTS, self._params(job_id=job_id, after=parents_after, limit=limit + 1))
        children = self._fetchall(JOB_CHILDREN, self._params(job_id=job_id, after=children_after, limit=limit + 1))
        return dependencies_page(parents, children, limit, job["workflow_id"])

    def workflow_progress(self, workflow_id: uuid.UUID, tenant: str | None = None) -> WorkflowProgress:
        row = self._fetchone(WORKFLOW_PROGRESS, self._params(workflow_id=workflow_id, tenant=tenant))
        return workflow_progress(workflow_id, row)


def _candidate(row: dict[str, Any]) -> RearmCandidate:
    return RearmCandidate(
        id=row["id"],
        state=JobState(row["state"]),
        on_parent_failure=row["on_parent_failure"],
        parents=tuple((uuid.UUID(p["id"]), JobState(p["state"])) for p in row["parents"]),
        parent_roots={uuid.UUID(p["id"]): uuid.UUID(p["root"]) for p in row["parents"] if p["root"] is not None},
    )
