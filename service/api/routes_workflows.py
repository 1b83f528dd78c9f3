"""Workflows over HTTP, read-only: ``GET /v1/jobs/{job_id}/dependencies``, a job's parents and
children with their states, each list paged by id (``parents_after`` / ``children_after``), and
its workflow's progress (every job of it counted by state). Another tenant's job is a 404, as
everywhere."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from service.api.dependencies import TenantDep, no_unknown_query_parameters
from service.api.problems import problem_responses
from service.jobs import JobState
from service.status import job_url
from service.web import StoreDep, blocking
from service.workflows import MAX_DEPENDENCIES_PAGE, Relative, WorkflowProgress

workflows_router = APIRouter()


class RelativeOut(BaseModel):
    job_id: uuid.UUID
    kind: str
    state: JobState
    url: str = Field(description="The job's status URL.")

    @classmethod
    def of(cls, relative: Relative) -> RelativeOut:
        return cls(job_id=relative.id, kind=relative.kind, state=relative.state, url=job_url(relative.id))


class WorkflowOut(BaseModel):
    """A workflow's jobs counted by state: ``done`` of ``total`` have ended."""

    workflow_id: uuid.UUID = Field(description="The workflow's id: its root job's.")
    total: int = Field(description="The workflow's jobs, all told.")
    done: int = Field(description="Those that ended (succeeded, failed or cancelled).")
    queued: int = Field(description="Queued, those waiting for parents included.")
    waiting: int = Field(description="Queued and waiting for parents.")
    running: int
    succeeded: int
    failed: int
    cancelled: int

    @classmethod
    def of(cls, progress: WorkflowProgress) -> WorkflowOut:
        return cls(
            workflow_id=progress.workflow_id,
            total=progress.total,
            done=progress.done,
            queued=progress.queued,
            waiting=progress.waiting,
            running=progress.running,
            succeeded=progress.succeeded,
            failed=progress.failed,
            cancelled=progress.cancelled,
        )


class DependenciesOut(BaseModel):
    job_id: uuid.UUID
    parents: list[RelativeOut] = Field(description="The jobs this one waits for, by id.")
    children: list[RelativeOut] = Field(description="The jobs that wait for this one, by id.")
    parents_after: uuid.UUID | None = Field(description="Pass as parents_after for the next page of parents.")
    children_after: uuid.UUID | None = Field(description="Pass as children_after for the next page of children.")
    workflow: WorkflowOut | None = Field(
        description="The progress of the workflow the job belongs to (every job of it, not only this page's); "
        "null for an independent job."
    )


@workflows_router.get(
    "/v1/jobs/{job_id}/dependencies",
    response_model=DependenciesOut,
    tags=["jobs"],
    summary="A job's parents and children (workflows), with their states",
    dependencies=[Depends(no_unknown_query_parameters)],
    responses=problem_responses(401, 404, 422, 503),
)
async def job_dependencies(
    job_id: uuid.UUID,
    tenant: TenantDep,
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=MAX_DEPENDENCIES_PAGE)] = 100,
    parents_after: uuid.UUID | None = None,
    children_after: uuid.UUID | None = None,
) -> DependenciesOut:
    page = await blocking(
        lambda: store.dependencies(
            job_id, tenant, limit=limit, parents_after=parents_after, children_after=children_after
        )
    )
    workflow = None
    if page.workflow_id is not None:
        workflow = WorkflowOut.of(await blocking(store.workflow_progress, page.workflow_id, tenant))
    return DependenciesOut(
        job_id=job_id,
        parents=[RelativeOut.of(p) for p in page.parents],
        children=[RelativeOut.of(c) for c in page.children],
        parents_after=page.parents_after,
        children_after=page.children_after,
        workflow=workflow,
    )
