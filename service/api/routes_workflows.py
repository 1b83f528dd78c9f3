"""Workflows over HTTP, read-only: ``GET /v1/jobs/{job_id}/dependencies``, a job's parents and
children with their states, each list paged by id (``parents_after`` / ``children_after``).
Another tenant's job is a 404, as everywhere."""

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
from service.workflows import MAX_DEPENDENCIES_PAGE, Relative

workflows_router = APIRouter()


class RelativeOut(BaseModel):
    job_id: uuid.UUID
    kind: str
    state: JobState
    url: str = Field(description="The job's status URL.")

    @classmethod
    def of(cls, relative: Relative) -> RelativeOut:
        return cls(job_id=relative.id, kind=relative.kind, state=relative.state, url=job_url(relative.id))


class DependenciesOut(BaseModel):
    job_id: uuid.UUID
    parents: list[RelativeOut] = Field(description="The jobs this one waits for, by id.")
    children: list[RelativeOut] = Field(description="The jobs that wait for this one, by id.")
    parents_after: uuid.UUID | None = Field(description="Pass as parents_after for the next page of parents.")
    children_after: uuid.UUID | None = Field(description="Pass as children_after for the next page of children.")


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
    return DependenciesOut(
        job_id=job_id,
        parents=[RelativeOut.of(p) for p in page.parents],
        children=[RelativeOut.of(c) for c in page.children],
        parents_after=page.parents_after,
        children_after=page.children_after,
    )
