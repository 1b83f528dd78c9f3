"""A job's status and its item outcomes as jobq shows them: the REST API's bodies and the CLI's
``--json``, one mapping for both (``jobq status`` loads this, not the API and its FastAPI).

Pydantic models, so the API publishes them in its OpenAPI document; no I/O.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, overload

from pydantic import BaseModel, Field

from service.jobs import ItemState, JobItem, JobState, JobStatus


class JobOut(BaseModel):
    """A job's status. Never carries the payload or the result."""

    job_id: uuid.UUID
    kind: str
    queue: str
    state: JobState
    done: int = Field(description="Items done so far, as the worker last reported.")
    total: int | None = Field(description="Items in all, when known.")
    items_ok: int = Field(description="Items recorded ok so far; GET /v1/jobs/{job_id}/items for their outcomes.")
    items_failed: int = Field(description="Items recorded failed so far; a job may succeed with some.")
    attempts: int = Field(description="Attempts started so far (the running one included).")
    max_attempts: int
    error: str | None = Field(
        description="Why the job failed (state failed), or why its last attempt did while it waits "
        "for a retry (state queued, attempts above 0)."
    )
    run_after: datetime | None = Field(
        description="When a queued job is due, if it was scheduled for later (a delay, or a retry "
        "backoff); `jobq explain` / GET /v1/jobs/{job_id}/explain say what else holds it."
    )
    stale: bool = Field(description="Running, but its lease expired: its worker is gone or stuck.")
    cancel_requested: bool
    parents_total: int = Field(description="Workflows: the parent jobs this job waits for (0: none).")
    parents_pending: int = Field(
        description="Parents not yet succeeded (or ended, with on_parent_failure 'run'): while above 0 the "
        "job is queued but not claimed; GET /v1/jobs/{job_id}/dependencies lists them."
    )
    workflow_id: uuid.UUID | None = Field(
        description="Workflows: the workflow the job belongs to (the id of its root job), shared by every "
        "job linked to it by dependencies or enqueued by one of its handlers; null for an independent job. "
        "GET /v1/jobs/{job_id}/dependencies counts its jobs by state."
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    result_url: str | None = Field(description="Where the result is; only when state is succeeded.")
    poll_after_seconds: int | None = Field(
        description="Poll again no sooner than this (also the Retry-After header); none once terminal."
    )

    @classmethod
    def of(cls, status: JobStatus, poll_after: int | None) -> JobOut:
        return cls(
            job_id=status.id,
            kind=status.kind,
            queue=status.queue,
            state=status.state,
            done=status.done,
            total=status.total,
            items_ok=status.items_ok,
            items_failed=status.items_failed,
            attempts=status.attempts,
            max_attempts=status.max_attempts,
            error=status.current_error,
            # Scheduled later than its last change (enqueue or retry): the database set it in
            # the future, and a status is read without a clock of its own to compare.
            run_after=_utc(status.run_after)
            if status.state is JobState.QUEUED and status.run_after > status.updated_at and not status.parents_pending
            else None,
            stale=status.stale,
            cancel_requested=status.cancel_requested,
            parents_total=status.parents_total,
            parents_pending=status.parents_pending,
            workflow_id=status.workflow_id,
            created_at=_utc(status.created_at),
            started_at=_utc(status.started_at),
            finished_at=_utc(status.finished_at),
            updated_at=_utc(status.updated_at),
            result_url=job_url(status.id) + "/result" if status.state is JobState.SUCCEEDED else None,
            poll_after_seconds=poll_after,
        )


class ItemOut(BaseModel):
    """One item's outcome."""

    index: int = Field(description="The item's position in the job's sequence, from 0.")
    state: ItemState
    result: Any = Field(description="What the handler recorded for the item (ok only).")
    error: str | None = Field(description="Why the item failed: its first line, then the traceback's end.")
    attempt: int = Field(description="The attempt that recorded this outcome.")
    finished_at: datetime

    @classmethod
    def of(cls, item: JobItem) -> ItemOut:
        return cls(
            index=item.index,
            state=item.state,
            result=item.result,
            error=item.error,
            attempt=item.attempt,
            finished_at=_utc(item.finished_at),
        )


def job_url(job_id: uuid.UUID) -> str:
    return f"/v1/jobs/{job_id}"


@overload
def _utc(moment: datetime) -> datetime: ...
@overload
def _utc(moment: None) -> None: ...
def _utc(moment: datetime | None) -> datetime | None:
    return moment.astimezone(UTC) if moment is not None else None
