"""Workflows on SQLite (service.workflows): the same operations as PostgreSQL's, each in the
write transaction (BEGIN IMMEDIATE) of the operation that needs it; no completion, enqueue or
failure can interleave with another, so no lock or version check is needed to order them."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import replace

from service.errors import IdempotencyConflict
from service.jobs import JobState, JobStatus, NewJob, new_job_id
from service.payloads import dump_payloads
from service.store import checks
from service.store.sqlfiles import statements
from service.store.sqlite.connection import Connected, status
from service.store.sqlite.queries import GET_JOB, GET_PAYLOAD, TENANT_FOR_TOKEN
from service.store.sqlite.statements import TENANT_COUNTER
from service.store.sqlite.timestamps import to_text
from service.workflows import (
    HELD_UNTIL,
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

_SQL = statements("sqlite")

LOCK_PARENTS = _SQL["lock_parents"]
BUMP_PARENTS = _SQL["bump_parents"]
ENQUEUE_DEPENDENT = _SQL["enqueue_dependent"]
INSERT_EDGE = _SQL["insert_edge"]
READ_JOBS = _SQL["read_jobs"]
RELEASE_CHILDREN = _SQL["release_children"]
DOOMED_DEPENDENTS = _SQL["doomed_dependents"]
CANCEL_DEPENDENT = _SQL["cancel_dependent"]
RELEASE_RUN_ANYWAY = _SQL["release_run_anyway"]
REARM_CANDIDATES = _SQL["rearm_candidates"]
PARENTS_OF = _SQL["parents_of"]
REARM_JOB = _SQL["rearm_job"]
HOLD_CANCELLED = _SQL["hold_cancelled"]
PARENT_RESULTS = _SQL["parent_results"]
JOB_PARENTS = _SQL["job_parents"]
JOB_CHILDREN = _SQL["job_children"]
UNFINISHED_PARENTS = _SQL["unfinished_parents"]
WORKFLOW_PROGRESS = _SQL["workflow_progress"]
READ_BY_IDEMPOTENCY_KEY = _SQL["read_by_idempotency_keys"]
RECORD_REPLAY = _SQL["record_replay"]

HELD_UNTIL_TEXT = HELD_UNTIL + ".000"


def release_children(conn: sqlite3.Connection, now: str, parent: uuid.UUID) -> None:
    """A parent succeeded: its children count one parent less (COMPLETE_JOBS's transaction)."""
    conn.execute(RELEASE_CHILDREN, {"parent": str(parent), "now": now})


def settle_dependents(conn: sqlite3.Connection, now: str, ids: Sequence[uuid.UUID]) -> None:
    """Jobs that ended failed or cancelled, in the transaction that ended them: their dependents
    cancelled all the way down, or released ('run')."""
    rows = conn.execute(DOOMED_DEPENDENTS, {"ids": json.dumps([str(i) for i in ids])}).fetchall()
    ended = [row["id"] for row in rows]
    if not ended:
        return
    for row in rows:
        if not row["direct"]:
            conn.execute(
                CANCEL_DEPENDENT,
                {"id": row["id"], "parent": row["parent"], "how": row["how"], "root": row["root"], "now": now},
            )
    conn.execute(RELEASE_RUN_ANYWAY, {"ids": json.dumps(ended), "now": now})


def rearm_dependents(conn: sqlite3.Connection, now: str, ids: Sequence[uuid.UUID], by: str) -> list[uuid.UUID]:
    """Replay's second step: the jobs the replayed jobs' failure cancelled wait for their
    parents again (service.workflows.rearm decides), each recorded in job_replays."""
    if not ids:
        return []
    rows = {row["id"]: row for row in conn.execute(REARM_CANDIDATES, {"ids": json.dumps([str(i) for i in ids])})}
    candidates = []
    parents_by_job: dict[uuid.UUID, list[str]] = {}
    for job_id, row in rows.items():
        parents = conn.execute(PARENTS_OF, {"id": job_id}).fetchall()
        parents_by_job[uuid.UUID(job_id)] = [p["id"] for p in parents]
        candidates.append(
            RearmCandidate(
                id=uuid.UUID(job_id),
                state=JobState(row["state"]),
                on_parent_failure=row["on_parent_failure"],
                parents=tuple((uuid.UUID(p["id"]), JobState(p["state"])) for p in parents),
                parent_roots={uuid.UUID(p["id"]): uuid.UUID(p["root"]) for p in parents},
            )
        )
    chosen = rearm(candidates)
    for held in still_cancelled(candidates, chosen):
        conn.execute(
            HOLD_CANCELLED,
            {"id": str(held.id), "error": held.error, "cancelled_by": str(held.cancelled_by), "now": now},
        )
    for job_id, pending in sorted(chosen.items()):
        row = rows[str(job_id)]
        conn.execute(REARM_JOB, {"id": row["id"], "pending": pending, "held_until": HELD_UNTIL_TEXT, "now": now})
        conn.execute(TENANT_COUNTER, {"tenant": row["tenant"]})
        if row["state"] == JobState.CANCELLED:
            conn.execute(
                RECORD_REPLAY,
                {
                    "job_id": row["id"],
                    "now": now,
                    "by": f"{by} (re-armed: job {row['cancelled_by']} was replayed)",
                    "state": row["state"],
                    "error": row["error"],
                    "attempts": row["attempts"],
                },
            )
    # The parents the re-armed jobs wait for, as an enqueue's: their completion (or end) must look
    # for children, which it does only with dependents_version moved; a parent that was cancelled or
    # failed when a child was submitted under it, then replayed or re-armed here, never was.
    waited_for = sorted({parent for job_id in chosen for parent in parents_by_job[job_id]})
    conn.execute(BUMP_PARENTS, {"ids": json.dumps(waited_for), "joined": "{}"})
    return sorted(chosen)


class Workflows(Connected):
    """Enqueueing a batch with dependencies, and the workflow reads."""

    def _enqueue_dependents(self, jobs: Sequence[NewJob], token_hash: str | None) -> list[JobStatus]:
        with self._write() as (conn, now):
            return insert_dependents(conn, now, jobs, token_hash, self.max_payload_bytes)

    def parent_results(self, job_id: uuid.UUID) -> list[ParentResult]:
        with self._read() as (conn, _now):
            rows = conn.execute(PARENT_RESULTS, {"job_id": str(job_id)}).fetchall()
        return [
            ParentResult(uuid.UUID(row["id"]), JobState(row["state"]), json.loads(row["body"]) if row["body"] else None)
            for row in rows
        ]

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
        with self._read() as (conn, now):
            found = conn.execute(GET_JOB, {"job_id": str(job_id), "tenant": tenant, "now": now}).fetchone()
            job = checks.found(found, job_id)
            parents = conn.execute(
                JOB_PARENTS, {"job_id": str(job_id), "after": _text(parents_after), "limit": limit + 1}
            ).fetchall()
            children = conn.execute(
                JOB_CHILDREN, {"job_id": str(job_id), "after": _text(children_after), "limit": limit + 1}
            ).fetchall()
        return dependencies_page([dict(r) for r in parents], [dict(r) for r in children], limit, job["workflow_id"])

    def workflow_progress(self, workflow_id: uuid.UUID, tenant: str | None = None) -> WorkflowProgress:
        with self._read() as (conn, _now):
            row = conn.execute(WORKFLOW_PROGRESS, {"workflow_id": str(workflow_id), "tenant": tenant}).fetchone()
        return workflow_progress(workflow_id, dict(row) if row is not None else None)


def _text(value: uuid.UUID | None) -> str | None:
    return None if value is None else str(value)


def _taken_keys(conn: sqlite3.Connection, now: str, jobs: Sequence[NewJob]) -> list[JobStatus] | None:
    """As PostgreSQL's: a batch with dependencies sent again is answered with its stored jobs."""
    keyed = [job for job in jobs if job.idempotency_key is not None]
    found = []
    for job in keyed:
        row = conn.execute(
            READ_BY_IDEMPOTENCY_KEY, {"tenant": job.tenant, "idempotency_key": job.idempotency_key, "now": now}
        ).fetchone()
        if row is not None:
            found.append((job, status(row)))
    if not found:
        return None
    if len(found) != len(jobs):
        raise IdempotencyConflict(
            "a batch with dependencies is stored whole or not at all: some of its idempotency keys are "
            "taken and some are not (or some of its jobs have none)"
        )
    answer = []
    for job, stored in found:
        payload = conn.execute(GET_PAYLOAD, {"job_id": str(stored.id), "tenant": stored.tenant}).fetchone()
        answer.append(checks.keyed_job(job, stored, json.loads(checks.found(payload, stored.id)["payload"])))
    return answer


def insert_dependents(
    conn: sqlite3.Connection,
    now: str,
    jobs: Sequence[NewJob],
    token_hash: str | None,
    max_payload_bytes: int,
    spawner: uuid.UUID | None = None,
) -> list[JobStatus]:
    """A batch with dependencies in the write transaction open on ``conn``, each payload within
    ``max_payload_bytes`` (the store's); ``spawner``: the job whose handler enqueued them (its
    follow-ups are part of its workflow, service.workflows.workflow_ids)."""
    ids = [new_job_id() for _ in jobs]
    if token_hash is not None:
        token = conn.execute(TENANT_FOR_TOKEN, {"token_hash": token_hash}).fetchone()
        tenant = checks.token_scope(token["tenant"] if token is not None else None)
        jobs = [replace(job, tenant=tenant) for job in jobs]
    parents = [str(i) for i in stored_parent_ids(jobs)]
    read = [*parents, str(spawner)] if spawner is not None else parents
    stored = {
        uuid.UUID(row["id"]): StoredParent(
            uuid.UUID(row["id"]),
            row["tenant"],
            JobState(row["state"]),
            uuid.UUID(row["cancelled_by"]) if row["cancelled_by"] else None,
            uuid.UUID(row["workflow_id"]) if row["workflow_id"] else None,
        )
        for row in conn.execute(LOCK_PARENTS, {"ids": json.dumps(read)}).fetchall()
    }
    wirings = wire(jobs, ids, stored)  # refuses before anything is inserted (and rolls back)
    workflows = workflow_ids(jobs, ids, stored, spawner)
    taken = _taken_keys(conn, now, jobs)
    if taken is not None:
        return taken
    joined = {str(job_id): str(workflow) for job_id, workflow in workflows.joined.items()}
    conn.execute(BUMP_PARENTS, {"ids": json.dumps(parents), "joined": json.dumps(joined)})
    rows = checks.enqueue_rows(
        jobs, ids, payloads=lambda values: dump_payloads(values, max_payload_bytes), time=to_text
    )
    for row, job, wiring, workflow in zip(rows, jobs, wirings, workflows.jobs, strict=True):
        conn.execute(
            ENQUEUE_DEPENDENT,
            {
                **row,
                "now": now,
                "state": wiring.state.value,
                "error": wiring.error,
                "cancelled_by": None if wiring.cancelled_by is None else str(wiring.cancelled_by),
                "parents_total": len(wiring.parents),
                "parents_pending": wiring.pending,
                "on_parent_failure": job.on_parent_failure,
                "dependents_version": int(wiring.has_children),
                "held_until": HELD_UNTIL_TEXT,
                "workflow_id": None if workflow is None else str(workflow),
            },
        )
        for parent in wiring.parents:
            conn.execute(INSERT_EDGE, {"parent": str(parent), "child": row["id"]})
    for tenant in sorted({job.tenant for job in jobs}):
        conn.execute(TENANT_COUNTER, {"tenant": tenant})
    found = {
        row["id"]: status(row)
        for row in conn.execute(READ_JOBS, {"ids": json.dumps([str(i) for i in ids]), "now": now})
    }
    return [found[str(job_id)] for job_id in ids]
