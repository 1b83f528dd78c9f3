"""Reading jobs on SQLite: a status, many statuses at once, pages, results, payloads,
attempts (the statements are in queries.py)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from service.jobs import JSON, Attempt, JobCount, JobPage, JobQuery, JobStatus, StatusRead
from service.store import checks
from service.store.base import RUNNING_JOBS_LIMIT, StoredResult
from service.store.encoding import substring_pattern
from service.store.rows import attempt
from service.store.sqlite.connection import READ, Connected, status
from service.store.sqlite.queries import (
    GET_JOB,
    GET_PAYLOAD,
    GET_RESULT,
    JOB_ATTEMPTS,
    JOB_LISTINGS,
    RESULT_CHUNK,
    RESULT_SIZE,
    RUNNING_JOBS,
    TENANT_FOR_TOKEN,
)
from service.store.sqlite.timestamps import to_text


class Reads(Connected):
    """The reads of jobs: what the API, the CLI and the console show."""

    def get(self, job_id: uuid.UUID, tenant: str | None = None, token_hash: str | None = None) -> JobStatus:
        with self._read() as (conn, now):
            if token_hash is not None:  # in-process reads cost no round trip: two lookups under one lock
                token = conn.execute(TENANT_FOR_TOKEN, {"token_hash": token_hash}).fetchone()
                tenant = checks.token_scope(token["tenant"] if token is not None else None)
            row = conn.execute(GET_JOB, {"job_id": str(job_id), "tenant": tenant, "now": now}).fetchone()
        return status(checks.found(row, job_id))

    def read_statuses(self, reads: Sequence[StatusRead]) -> list[JobStatus | None]:
        found: list[JobStatus | None] = []
        with self._read() as (conn, now):  # in-process reads cost no round trip: one lookup each, one lock
            for read in reads:
                tenant = read.tenant
                if read.token_hash is not None:
                    token = conn.execute(TENANT_FOR_TOKEN, {"token_hash": read.token_hash}).fetchone()
                    tenant = token["tenant"] if token is not None else None
                row = (
                    None
                    if tenant is None
                    else conn.execute(GET_JOB, {"job_id": str(read.job_id), "tenant": tenant, "now": now}).fetchone()
                )
                found.append(None if row is None else status(row))
        return found

    def get_result(self, job_id: uuid.UUID, tenant: str | None = None) -> JSON:
        with self._read() as (conn, _now):
            row = conn.execute(GET_RESULT, {"job_id": str(job_id), "tenant": tenant}).fetchone()
        return json.loads(checks.result_row(row, job_id)["body"])

    def result_size(self, job_id: uuid.UUID, tenant: str | None = None) -> StoredResult:
        with self._read() as (conn, _now):
            row = conn.execute(RESULT_SIZE, {"job_id": str(job_id), "tenant": tenant}).fetchone()
        row = checks.result_row(row, job_id)
        return StoredResult(uuid.UUID(row["result_id"]), row["size"])

    def read_result_chunk(self, result_id: uuid.UUID, offset: int, length: int) -> bytes:
        checks.chunk_bounds(offset, length)
        with self._read() as (conn, _now):
            row = conn.execute(
                RESULT_CHUNK, {"result_id": str(result_id), "start": offset + 1, "length": length}
            ).fetchone()
        return b"" if row is None or row["chunk"] is None else bytes(row["chunk"])

    def get_payload(self, job_id: uuid.UUID, tenant: str | None = None) -> JSON:
        with self._read() as (conn, _now):
            row = conn.execute(GET_PAYLOAD, {"job_id": str(job_id), "tenant": tenant}).fetchone()
        return json.loads(checks.found(row, job_id)["payload"])

    def list_jobs(self, query: JobQuery) -> JobPage:
        page, newer, _count = JOB_LISTINGS[checks.job_listing(query)]
        params = _listing_params(query, checks.page_limit(query.limit))
        with self._read() as (conn, now):
            rows = conn.execute(newer if query.before_id is not None else page, {**params, "now": now}).fetchall()
        return checks.job_page([status(row) for row in rows], query)

    def count_jobs(self, query: JobQuery, budget: int) -> JobCount:
        *_, count = JOB_LISTINGS[checks.job_listing(query)]
        params = _listing_params(query, checks.count_budget(budget) + 1)
        with self._read() as (conn, now):
            row = conn.execute(count, {**params, "now": now}).fetchone()
        return checks.job_count(row, budget)

    def job_attempts(self, job_id: uuid.UUID) -> list[Attempt]:
        with self._read() as (conn, _now):
            rows = conn.execute(JOB_ATTEMPTS, {"job_id": str(job_id)}).fetchall()
        return [attempt(row, READ) for row in rows]

    def running_jobs(self, limit: int = RUNNING_JOBS_LIMIT) -> list[JobStatus]:
        with self._read() as (conn, now):
            rows = conn.execute(RUNNING_JOBS, {"now": now, "limit": limit}).fetchall()
        return [status(row) for row in rows]


def _listing_params(query: JobQuery, limit: int) -> dict[str, Any]:
    def text(moment: datetime | None) -> str | None:
        return to_text(moment) if moment else None

    return {
        "tenant": query.tenant,
        "state": query.state.value if query.state else None,
        "kind": query.kind,
        "queue": query.queue,
        "created_after": text(query.created_after),
        "created_before": text(query.created_before),
        "idempotency_key": query.idempotency_key,
        "concurrency_key": query.concurrency_key,
        "workflow_id": str(query.workflow_id) if query.workflow_id else None,
        "error_like": substring_pattern(query.error_text),
        "after_id": str(query.after_id) if query.after_id else None,
        "before_id": str(query.before_id) if query.before_id else None,
        "limit": limit,
    }
