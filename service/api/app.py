"""The REST API's part of the app: the app class with the fast entrances in front, the
API's routes, docs and OpenAPI, and what the API keeps on ``app.state`` once started.

The app itself is composed at one root, :func:`service.app.create_app`, which mounts
this and the console side by side; its lifespan opens the store and calls
:func:`start_api`. Nothing happens at import time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.datastructures import State
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from service.api.auth import DEFAULT_TENANT
from service.api.coalesce import CoalescedStatusReads, CoalescedSubmits
from service.api.docs import mount_docs
from service.api.fast_poll import StatusPollFastPath
from service.api.fast_submit import SubmitFastPath
from service.api.limits import BodySizeLimit
from service.api.problems import Problem, problem_handler
from service.api.routes import health, router
from service.api.routes_limits import limits_router
from service.api.routes_ops import ops
from service.api.routes_workflows import workflows_router
from service.config import Settings
from service.errors import JobqError
from service.payloads import submit_body_limit
from service.store import Store

log = logging.getLogger("jobq.api")

DESCRIPTION = """\
Submit long-running jobs, poll their progress, fetch their results.

Every `/v1` request carries `Authorization: Bearer <token>` (`jobq token create --tenant NAME`).
Errors are `application/problem+json` (RFC 9457). Poll a job no more often than its
`Retry-After` says, or long-poll with `?wait=30`.
"""


class JobqApi(FastAPI):
    """FastAPI, with the fast paths of the status poll and the submit in front of all of it
    (see fast_poll and fast_submit)."""

    fast_poll: StatusPollFastPath | None = None  # None: every poll goes to the routes
    fast_submit: SubmitFastPath | None = None  # None: every submit goes to the routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.fast_poll is not None and await self.fast_poll.answered(scope, send):
            return
        if self.fast_submit is not None:
            # It reads a submit's body to decide: what it leaves to the routes gets the body handed on.
            left = await self.fast_submit.answer(scope, receive, send)
            if left is None:
                return
            receive = left
        await super().__call__(scope, receive, send)


def new_api(lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]]) -> JobqApi:
    """The app, bare: the API's title and description, no routes yet (:func:`mount_api` adds them)."""
    return JobqApi(
        title="jobq",
        version="1",
        summary="A job queue for long-running work.",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # mount_docs serves /docs and /redoc from local files instead of a CDN
        redoc_url=None,
    )


def start_api(state: State, store: Store, settings: Settings) -> None:
    """What the API's fast entrances share once the store is open (the app's lifespan)."""
    state.status_reads = CoalescedStatusReads(store)
    state.submits = CoalescedSubmits(store, settings.max_batch_body_bytes)
    if not settings.auth:
        log.warning(
            "JOBQ_AUTH=off: every request is served as tenant %r without a token; use this only on your own machine",
            DEFAULT_TENANT,
        )


def mount_api(app: JobqApi, settings: Settings) -> None:
    """The API's error answers, body cap, fast entrances, routes and docs, on ``app``."""
    # One handler for every error: the jobq tree, the framework's, and the unexpected
    # (the console adds its own two, for a missing login and a refused CSRF token).
    for exception_class in (JobqError, RequestValidationError, StarletteHTTPException, Exception):
        app.add_exception_handler(exception_class, problem_handler)
    app.add_middleware(
        BodySizeLimit,
        limit=settings.max_body_bytes,
        limits_by_path={
            # Room for a payload at its bound and the job's other fields: the store refuses a larger payload.
            "/v1/jobs": (submit_body_limit(settings.max_body_bytes), "JOBQ_MAX_BODY_BYTES"),
            "/v1/jobs/batch": (settings.max_batch_body_bytes, "JOBQ_MAX_BATCH_BODY_BYTES"),
        },
    )
    # A plain GET /v1/jobs/{id} that succeeds is answered before FastAPI's machinery (see fast_poll).
    app.fast_poll = StatusPollFastPath(app.state)
    app.fast_submit = SubmitFastPath(app.state)  # and a plain POST /v1/jobs (see fast_submit)
    app.include_router(ops)  # first: its literal /v1/jobs/replay wins over /v1/jobs/{job_id}
    app.include_router(limits_router)
    app.include_router(workflows_router)
    app.include_router(router)
    app.include_router(health)
    mount_docs(app)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, plus the Problem schema the error responses refer to."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            description=app.description,
            routes=app.routes,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(problem.pop("$defs", {}))
        components["Problem"] = problem
        app.openapi_schema = schema
    return app.openapi_schema
