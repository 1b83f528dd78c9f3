"""Limits and "why isn't my job running?" over HTTP, read-only.

``GET /v1/jobs/{job_id}/explain`` answers for one of the tenant's jobs, from the
database as it is now (service.explain words it; running job ids of a full scope
are shown only when they are the tenant's own). ``GET /v1/limits`` shows a tenant
its own scopes.

A tenant sees the limits that apply to it as a tenant (its tenant:NAME limit and
the tenant:* default) and its own counter (how many of its jobs run now, against
which limit). Kind, queue and key limits are the operator's, set fleet-wide with
``jobq limits set``; they name other tenants' work too, so they are not shown here.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from service.api.dependencies import TenantDep, no_unknown_query_parameters
from service.api.problems import problem_responses
from service.explain import REASON_CODES, explain
from service.jobs import WORKER_ALIVE_SECONDS, JobState
from service.limits import Limit, ScopeUsage, format_rate
from service.web import StoreDep, blocking

limits_router = APIRouter()


class LimitOut(BaseModel):
    scope: str = Field(description="tenant:NAME (yours) or tenant:* (the default every tenant gets on its own).")
    concurrency: int | None = Field(description="At most this many of the scope's jobs run at once.")
    rate: str | None = Field(description="At most N starts per window: 5/s, 60/min.", examples=["20/s"])
    weight: float | None = Field(description="The tenant's share of free slots against other tenants (default 1).")

    @classmethod
    def of(cls, limit: Limit) -> LimitOut:
        return cls(scope=limit.scope, concurrency=limit.concurrency, rate=limit.rate_text, weight=limit.weight)


class ScopeOut(BaseModel):
    scope: str
    running: int = Field(description="Your jobs running now, counted by the claim itself.")
    concurrency: int | None
    rate: str | None

    @classmethod
    def of(cls, usage: ScopeUsage) -> ScopeOut:
        return cls(
            scope=usage.scope,
            running=usage.running,
            concurrency=usage.concurrency,
            rate=format_rate(usage.rate, usage.per_seconds),
        )


class LimitsOut(BaseModel):
    limits: list[LimitOut]
    scopes: list[ScopeOut] = Field(description="Your counter, when a limit applies to you.")


@limits_router.get(
    "/v1/limits",
    response_model=LimitsOut,
    tags=["limits"],
    summary="The limits that apply to your tenant",
    dependencies=[Depends(no_unknown_query_parameters)],
    responses=problem_responses(401, 503),
)
async def list_limits(tenant: TenantDep, store: StoreDep) -> LimitsOut:
    limits = await blocking(store.list_limits, tenant)
    usage = await blocking(store.scope_usage, [f"tenant:{tenant}"])
    return LimitsOut(limits=[LimitOut.of(limit) for limit in limits], scopes=[ScopeOut.of(u) for u in usage])


class ReasonOut(BaseModel):
    code: str = Field(description="One of: " + ", ".join(REASON_CODES) + ".")
    message: str
    details: dict[str, Any] = Field(
        description="The reason's facts: due_at, scope, running, limit, "
        "running_job_ids, next_start_at, kinds_handled, ahead, worker, ..."
    )


class ExplanationOut(BaseModel):
    job_id: uuid.UUID
    state: JobState
    summary: str = Field(description="What holds the job now, in words (the first reason).")
    reasons: list[ReasonOut]


@limits_router.get(
    "/v1/jobs/{job_id}/explain",
    response_model=ExplanationOut,
    tags=["jobs"],
    summary="Why your job is not running (or how it runs, or how it ended)",
    dependencies=[Depends(no_unknown_query_parameters)],
    responses=problem_responses(401, 404, 422, 503),
)
async def explain_job(job_id: uuid.UUID, tenant: TenantDep, store: StoreDep) -> ExplanationOut:
    facts = await blocking(lambda: store.explain_facts(job_id, tenant, workers_seen_within=WORKER_ALIVE_SECONDS))
    explanation = explain(facts)
    return ExplanationOut(
        job_id=explanation.job_id,
        state=explanation.state,
        summary=explanation.summary,
        reasons=[ReasonOut(code=r.code, message=r.message, details=r.details) for r in explanation.reasons],
    )
