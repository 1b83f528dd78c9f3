"""Reading jobs on PostgreSQL: a status, many statuses at once, pages, results, payloads,
attempts (the statements are in queries.py)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from service.errors import JobNotFound, Unauthorized
from service.jobs import JSON, Attempt, JobCount, JobPage, JobQuery, JobStatus, StatusRead
from service.store import checks
from service.store.base import RUNNING_JOBS_LIMIT, StoredResult
from service.store.encoding import substring_pattern
from service.store.postgres.connection import READ, Connected, status
from service.store.postgres.queries import (
    GET_JOB,
    GET_JOB_FOR_TOKEN,
    GET_PAYLOAD,
    GET_RESULT,
    JOB_ATTEMPTS,
    JOB_LISTINGS,
    READ_STATUSES,
    RESULT_CHUNK,
    RESULT_SIZE,
    RUNNING_JOBS,
)
from service.store.rows import attempt


class Reads(Connected):
    """The reads of jobs: what the API, the CLI and the console show."""

    def get(self, job_id: uuid.UUID, tenant: str | None = None, token_hash: str | None = None) -> JobStatus:
        if token_hash is not None:
            found = self._fetchone(GET_JOB_FOR_TOKEN, self._params(job_id=job_id, token_hash=token_hash), replay=True)
            if found is None:
                raise Unauthorized("unknown or revoked token")
            if found["id"] is None:
                raise JobNotFound(job_id)
            return status(found)
        return status(
            checks.found(self._fetchone(GET_JOB, self._params(job_id=job_id, tenant=tenant), replay=True), job_id)
        )

    def read_statuses(self, reads: Sequence[StatusRead]) -> list[JobStatus | None]:
        if not reads:
            return []
        rows = self._fetchall(
            READ_STATUSES,
            self._params(
                ids=[r.job_id for r in reads],
                tenants=[r.tenant for r in reads],
                token_hashes=[r.token_hash for r in reads],
            ),
            replay=True,
        )
        found: list[JobStatus | None] = [None] * len(reads)
        for row in rows:
            found[row["ord"] - 1] = status(row)
        return found

    def get_result(self, job_id: uuid.UUID, tenant: str | None = None) -> JSON:
        row = self._fetchone(GET_RESULT, self._params(job_id=job_id, tenant=tenant), replay=True)
        return checks.result_row(row, job_id)["body"]

    def result_size(self, job_id: uuid.UUID, tenant: str | None = None) -> StoredResult:
        row = checks.result_row(self._fetchone(RESULT_SIZE, self._params(job_id=job_id, tenant=tenant)), job_id)
        return StoredResult(row["result_id"], row["size"])

    def read_result_chunk(self, result_id: uuid.UUID, offset: int, length: int) -> bytes:
        checks.chunk_bounds(offset, length)
        params = self._params(result_id=result_id, start=offset + 1, length=length)

        def run() -> bytes:
            with self._connection() as conn:
                # Binary: the chunk's bytes as they are, not hex text twice their size to decode.
                row = conn.execute(RESULT_CHUNK, params, binary=True).fetchone()
            return b"" if row is None or row["chunk"] is None else bytes(row["chunk"])

        return self._retrying(run)

    def get_payload(self, job_id: uuid.UUID, tenant: str | None = None) -> JSON:
        row = self._fetchone(GET_PAYLOAD, self._params(job_id=job_id, tenant=tenant), replay=True)
        return checks.found(row, job_id)["payload"]

    def list_jobs(self, query: JobQuery) -> JobPage:
        page, newer, _count = JOB_LISTINGS[checks.job_listing(query)]
        rows = self._fetchall(
            newer if query.before_id is not None else page,
            self._listing_params(query, checks.page_limit(query.limit)),
            replay=True,
        )
        return checks.job_page([status(row) for row in rows], query)

    def count_jobs(self, query: JobQuery, budget: int) -> JobCount:
        *_, count = JOB_LISTINGS[checks.job_listing(query)]
        row = self._fetchone(count, self._listing_params(query, checks.count_budget(budget) + 1), replay=True)
        return checks.job_count(row, budget)

    def _listing_params(self, query: JobQuery, limit: int) -> dict[str, Any]:
        return self._params(
            tenant=query.tenant,
            state=query.state.value if query.state else None,
            kind=query.kind,
            queue=query.queue,
            created_after=query.created_after,
            created_before=query.created_before,
            idempotency_key=query.idempotency_key,
            concurrency_key=query.concurrency_key,
            workflow_id=query.workflow_id,
            error_like=substring_pattern(query.error_text),
            after_id=query.after_id,
            before_id=query.before_id,
            limit=limit,
        )

    def job_attempts(self, job_id: uuid.UUID) -> list[Attempt]:
        return [attempt(row, READ) for row in self._fetchall(JOB_ATTEMPTS, self._params(job_id=job_id), replay=True)]

    def running_jobs(self, limit: int = RUNNING_JOBS_LIMIT) -> list[JobStatus]:
        return [status(row) for row in self._fetchall(RUNNING_JOBS, self._params(limit=limit), replay=True)]
