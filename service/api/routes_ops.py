"""Operations over HTTP: the dead-letter path (failures, replay) and ``/metrics``.

- ``GET /v1/failures``: the tenant's failed jobs of a window, grouped by kind and
  normalised error (the same data as ``jobq failures``).
- ``POST /v1/jobs/replay``: the tenant's failed (or cancelled) jobs back to
  queued, attempts 0, by ids or by a filter (the same filter as ``jobq replay``),
  recorded as replayed by ``api:<tenant>``; ``dry_run`` answers which jobs would
  go and changes nothing.
- ``GET /metrics``: Prometheus text (:mod:`service.metrics`).

Like every route, each is one store call scoped by the token's tenant; a job of
another tenant is never listed nor replayed, just as if it did not exist.

``/metrics`` asks for no token, as Prometheus targets usually do: a scraper
holds no tenant, and the numbers are the whole fleet's, aggregated (queue and
kind names, counts and ages; no tenant, payload, error text or id). Keep it off
the public network: expose only ``/v1`` at your ingress, or scrape the API on an
internal address. Each process reads the database for it at most once every
``CACHE_SECONDS``, however often it is asked.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.api.dependencies import TenantDep, no_unknown_query_parameters
from service.api.problems import problem_responses
from service.api.schemas import MAX_BATCH_JOBS, Name, storable_field
from service.durations import DURATION_PATTERN, parse_duration
from service.jobs import FailureGroup, ReplayFilter
from service.metrics import CONTENT_TYPE, MetricsCache
from service.payloads import MAX_NAME_LENGTH
from service.status import job_url
from service.web import NowDep, StoreDep, blocking

ops = APIRouter()
_v1 = [Depends(no_unknown_query_parameters)]

Duration = Annotated[
    str,
    Field(
        pattern=DURATION_PATTERN,
        description="A whole number from 1 to 9999 and a unit: s, m, h, d or w (30s, 15m, 24h, 42d).",
        examples=["24h"],
    ),
]
Text = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH), AfterValidator(storable_field)]
JobIds = Annotated[
    list[Annotated[uuid.UUID, Field(strict=False)]],  # a UUID arrives as a JSON string
    Field(min_length=1, max_length=MAX_BATCH_JOBS),
]


# -- failures -------------------------------------------------------------------------------


class FailureGroupOut(BaseModel):
    """Failed jobs that share a kind and a normalised error: one bug, however many jobs."""

    kind: str
    error_group: str | None = Field(
        description="The error's exception line, ids and numbers masked, at most 80 characters."
    )
    count: int
    first_seen: datetime
    last_seen: datetime
    example_job_id: uuid.UUID
    example_job_url: str

    @classmethod
    def of(cls, group: FailureGroup) -> FailureGroupOut:
        return cls(
            kind=group.kind,
            error_group=group.error_group,
            count=group.count,
            first_seen=group.first_seen.astimezone(UTC),
            last_seen=group.last_seen.astimezone(UTC),
            example_job_id=group.example_job_id,
            example_job_url=job_url(group.example_job_id),
        )


class FailuresOut(BaseModel):
    since: datetime = Field(description="The start of the window: failures that ended since then.")
    groups: list[FailureGroupOut] = Field(description="Biggest first.")


@ops.get(
    "/v1/failures",
    response_model=FailuresOut,
    tags=["operations"],
    summary="Your failed jobs, grouped by kind and error",
    dependencies=_v1,
    responses=problem_responses(401, 422, 503),
)
async def failures(
    tenant: TenantDep,
    store: StoreDep,
    now: NowDep,
    since: Annotated[
        str,
        Query(pattern=DURATION_PATTERN, description="How far back: 30s, 15m, 24h, 42d (1 to 9999 and a unit)."),
    ] = "24h",
    kind: Annotated[str | None, Query(min_length=1, max_length=MAX_NAME_LENGTH, description="Only this kind.")] = None,
) -> FailuresOut:
    """One indexed query over the window: one bug is one group, whatever ids and numbers its errors hold."""
    start = now - timedelta(seconds=parse_duration(since, name="since"))
    groups = await blocking(store.failure_groups, start, kind, tenant)
    return FailuresOut(since=start.astimezone(UTC), groups=[FailureGroupOut.of(g) for g in groups])


# -- replay ---------------------------------------------------------------------------------


class ReplayRequest(BaseModel):
    """Which of your terminal jobs to queue again: ``ids`` or ``kind`` or both; each field
    given narrows the others (ids of that kind, whose error contains error_like…)."""

    model_config = ConfigDict(
        extra="forbid",  # like every request model (schemas.py): no state, attempts or tenant
        strict=True,
        json_schema_extra={"anyOf": [{"required": ["ids"]}, {"required": ["kind"]}]},
    )

    ids: JobIds | SkipJsonSchema[None] = Field(
        default=None, description=f"These jobs (at most {MAX_BATCH_JOBS}), whether failed or cancelled."
    )
    kind: Name | SkipJsonSchema[None] = Field(default=None, description="Jobs of this kind.")
    error_like: Text | SkipJsonSchema[None] = Field(
        default=None, description="Only jobs whose error contains this text (case-insensitive)."
    )
    since: Duration | SkipJsonSchema[None] = Field(default=None, description="Only jobs that ended this recently.")
    include_cancelled: bool = Field(default=False, description="Cancelled jobs of the kind too, not only failed.")
    dry_run: bool = Field(default=False, description="Answer which jobs would be replayed; change nothing.")
    failed_items: bool = Field(
        default=False,
        description="Re-run only the failed items: jobs (succeeded or failed) with failed items go back to "
        "queued, their failed outcomes removed and their ok ones kept, so the next attempt runs only those.",
    )

    @field_validator("ids", "kind", "error_like", "since", mode="before")
    @classmethod
    def _absent_not_null(cls, value: Any) -> Any:
        """The schema has no nulls: a filter left out is absent, not null."""
        if value is None:
            raise ValueError("must not be null; leave the field out instead")
        return value

    @model_validator(mode="after")
    def _ids_or_kind(self) -> ReplayRequest:
        if not self.ids and self.kind is None:
            raise ValueError("name the jobs (ids) or a kind: replaying every failed job needs one of them")
        return self


class ReplayOut(BaseModel):
    dry_run: bool
    count: int = Field(description="Jobs replayed (or, in a dry run, that would be).")
    job_ids: list[uuid.UUID]


@ops.post(
    "/v1/jobs/replay",
    response_model=ReplayOut,
    tags=["operations"],
    summary="Replay failed jobs",
    dependencies=_v1,
    responses=problem_responses(401, 413, 422, 503),
)
async def replay(body: ReplayRequest, tenant: TenantDep, store: StoreDep, now: NowDep) -> ReplayOut:
    """Back to queued with attempts 0, recorded with when and by whom (``api:<tenant>``).

    Only failed jobs (and cancelled ones with ``include_cancelled`` or by id) are
    replayed; ids that name no such job of yours are left out of the answer.
    """
    which = ReplayFilter(
        tenant=tenant,
        ids=tuple(dict.fromkeys(body.ids or ())),
        kind=body.kind,
        error_like=body.error_like,
        since=now - timedelta(seconds=parse_duration(body.since, name="since")) if body.since else None,
        include_cancelled=body.include_cancelled,
        failed_items=body.failed_items,
    )
    replayed = await blocking(store.replay, which, f"api:{tenant}", body.dry_run)
    return ReplayOut(dry_run=body.dry_run, count=len(replayed), job_ids=replayed)


@ops.api_route("/v1/jobs/replay", methods=["GET", "HEAD"], include_in_schema=False)
async def replay_is_post_only() -> None:
    """Without this, GET /v1/jobs/replay would reach GET /v1/jobs/{job_id} and be a 422."""
    raise StarletteHTTPException(status_code=405)


# -- metrics --------------------------------------------------------------------------------


def metrics_cache(request: Request, store: StoreDep) -> MetricsCache:
    """The app's one cache, made on the first scrape (the store exists only once the app runs)."""
    cache: MetricsCache | None = getattr(request.app.state, "metrics_cache", None)
    if cache is None or cache.store is not store:
        cache = request.app.state.metrics_cache = MetricsCache(store)
    return cache


_METRICS_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The Prometheus text format (version 0.0.4).",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    },
}


@ops.get(
    "/metrics",
    tags=["operations"],
    summary="Prometheus metrics of the whole queue (no token)",
    response_class=Response,
    responses={**_METRICS_RESPONSE, **problem_responses(503)},
)
async def metrics(cache: Annotated[MetricsCache, Depends(metrics_cache)]) -> Response:
    """Queue depth and age, jobs by state, last-hour outcomes and failure ratios, run time and
    pickup histograms, reclaimed jobs, workers alive, and PostgreSQL's bloat signals.
    Unauthenticated: serve it on an internal address only (see the README)."""
    return Response(content=await blocking(cache.render), media_type=CONTENT_TYPE)
