"""Errors as RFC 9457 problem details (``application/problem+json``).

One function, :func:`problem_for`, maps every exception the API can meet to a
problem: the jobq exception tree (:mod:`service.errors`) first, then the
framework's own (request validation, unknown route, wrong method, a body over
the limit), then anything else as a 500 that is logged and says nothing about
the internals. :func:`problem_handler` is the one exception handler the app
registers for all of them.

    exception                       status  type (urn:jobq:problem:…)
    PayloadTooLarge, the body cap    413     payload-too-large
    InvalidInput, validation         422     invalid-request
    Unauthorized                     401     unauthorized      (+ WWW-Authenticate: Bearer)
    NotFound (JobNotFound, …)        404     not-found
    InvalidTransition                409     invalid-state     (+ "state")
    IdempotencyConflict              409     idempotency-conflict
    SchemaMismatch                   503     schema-mismatch   (+ "schema": "ahead" | "behind", Retry-After: 5)
    StoreUnavailable                 503     unavailable       (+ Retry-After: 1)
    an undecodable body (400)        422     invalid-request
    other HTTP errors (404, 405…)    as is   http-<status>
    anything else                    500     internal
"""

from __future__ import annotations

import logging
import re
from http import HTTPStatus
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Match

from service.errors import (
    IdempotencyConflict,
    InvalidInput,
    InvalidTransition,
    JobqError,
    NotFound,
    PayloadTooLarge,
    SchemaMismatch,
    StoreUnavailable,
    Unauthorized,
)

log = logging.getLogger("jobq.api")

PROBLEM_MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:jobq:problem:"


class FieldError(BaseModel):
    """One rejected part of a request."""

    model_config = ConfigDict(extra="forbid")

    loc: list[str | int] = Field(description="Where: ['body', 'kind'], ['query', 'limit'], ['header', …].")
    msg: str = Field(description="What is wrong with it.")
    type: str = Field(description="A stable code for the kind of error (pydantic's error type).")


class Problem(BaseModel):
    """An error, as RFC 9457 problem details."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="A URI naming the kind of problem, e.g. urn:jobq:problem:not-found.")
    title: str = Field(description="A short summary of the kind of problem.")
    status: int = Field(description="The HTTP status code.")
    detail: str = Field(description="What went wrong with this request, and what to do about it.")
    state: str | None = Field(default=None, description="The job's current state (409 invalid-state only).")
    errors: list[FieldError] | None = Field(
        default=None, description="Each rejected field (422 invalid-request from validation only)."
    )


def problem_for(exc: BaseException) -> tuple[Problem, dict[str, str]]:
    """The problem (and extra headers) that answers ``exc``."""
    headers: dict[str, str] = {}
    if isinstance(exc, JobqError):
        if isinstance(exc, PayloadTooLarge):
            return _problem(413, "payload-too-large", str(exc)), headers
        if isinstance(exc, InvalidInput):
            return _problem(422, "invalid-request", str(exc)), headers
        if isinstance(exc, Unauthorized):
            return _problem(401, "unauthorized", str(exc)), {"WWW-Authenticate": "Bearer"}
        if isinstance(exc, NotFound):
            return _problem(404, "not-found", str(exc)), headers
        if isinstance(exc, InvalidTransition):
            return _problem(409, "invalid-state", str(exc), state=exc.state), headers
        if isinstance(exc, IdempotencyConflict):
            return _problem(409, "idempotency-conflict", str(exc)), headers
        if isinstance(exc, SchemaMismatch):
            # Revisions and advice only (no host): the probe's reader is an operator.
            return _problem(503, "schema-mismatch", str(exc), schema=exc.direction), {"Retry-After": "5"}
        if isinstance(exc, StoreUnavailable):
            # The store's message may name hosts; the log keeps it, the client gets advice.
            log.warning("database unavailable: %s", exc)
            detail = "the database is unavailable right now; nothing was changed by this request, retry shortly"
            return _problem(503, "unavailable", detail), {"Retry-After": "1"}
        log.error("unmapped jobq error: %r", exc)
        return _problem(500, "internal", "the server failed to handle this request"), headers
    if isinstance(exc, RequestValidationError):
        errors = [_field_error(error) for error in exc.errors()]
        detail = "; ".join(_describe(error) for error in errors[:5])
        if len(errors) > 5:
            detail += f"; and {len(errors) - 5} more"
        return _problem(422, "invalid-request", detail, errors=errors), headers
    if isinstance(exc, StarletteHTTPException):
        headers = dict(exc.headers or {})
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        if exc.status_code == 404:
            detail = "no such endpoint; see /docs for the API"
        elif exc.status_code == 405:
            detail = f"method not allowed here; allowed: {headers.get('Allow', 'see /docs')}"
        elif exc.status_code == 400:  # FastAPI's answer to a body it cannot decode (not UTF-8, too deep)
            if isinstance(exc.__cause__, RecursionError):
                detail = "the request body's JSON is nested too deeply to read: flatten it"
            else:
                detail = "the request body could not be read as JSON: send UTF-8 JSON text"
            return _problem(422, "invalid-request", detail), headers
        if exc.status_code == 413:  # the body cap (service.api.limits)
            return _problem(413, "payload-too-large", detail), headers
        return _problem(exc.status_code, f"http-{exc.status_code}", detail), headers
    log.error("unhandled error", exc_info=exc)
    return _problem(500, "internal", "the server failed to handle this request"), headers


async def problem_handler(request: Request, exc: Exception) -> JSONResponse:
    """The app's one exception handler: every error leaves as problem+json."""
    problem, headers = problem_for(exc)
    if isinstance(exc, RequestValidationError) and _body_not_sent_as_json(exc, request):
        content_type = request.headers.get("content-type") or "none"
        problem.detail = f"send the body as JSON with Content-Type: application/json (it came as {content_type!r})"
    if problem.status == 405:
        allowed = allowed_methods(request)
        headers["Allow"] = allowed
        problem.detail = f"method not allowed here; allowed: {allowed}"
    return problem_response(problem, headers)


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")
_OPERATIONS = frozenset(method.lower() for method in _METHODS)


def allowed_methods(request: Request) -> str:
    """Every method the request's path answers to (Starlette names only its first route's).

    The app's own OpenAPI paths say which, a literal path (``/v1/jobs/batch``) winning over a
    pattern it also fits (``/v1/jobs/{job_id}``), as the documentation does. A path outside
    them (the console's) asks the router for each method. Neither reads ``route.methods``:
    FastAPI 0.165 nests included routers (``_IncludedRouter``), whose routes that never sees,
    and every 405 said "allowed: " with an empty Allow header (issue 26)."""
    path = request.url.path
    literal: set[str] = set()
    patterned: set[str] = set()
    for template, operations in request.app.openapi().get("paths", {}).items():
        methods = {name.upper() for name in operations if name in _OPERATIONS}
        if template == path:
            literal |= methods
        elif "{" in template and re.fullmatch(re.sub(r"\\\{[^}]*\\\}", "[^/]+", re.escape(template)), path):
            patterned |= methods
    documented = literal or patterned
    if documented:
        return ", ".join(sorted(documented))
    probed = [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL for route in request.app.router.routes
        )
    ]
    return ", ".join(probed)


def _body_not_sent_as_json(exc: RequestValidationError, request: Request) -> bool:
    """The body was refused whole (FastAPI did not read it as JSON) and its Content-Type is not
    JSON: the Content-Type is what to fix, however valid the JSON inside (issue 26)."""
    whole = any(tuple(error.get("loc", ())) == ("body",) for error in exc.errors())
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return whole and not (media_type == "application/json" or media_type.endswith("+json"))


def problem_response(problem: Problem, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        problem.model_dump(exclude_none=True),
        status_code=problem.status,
        headers=headers,
        media_type=PROBLEM_MEDIA_TYPE,
    )


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries for the problems an endpoint can answer with."""
    return {
        status: {
            "description": f"{HTTPStatus(status).phrase} (problem details)",
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


def _problem(status: int, slug: str, detail: str, **extensions: Any) -> Problem:
    return Problem(
        type=TYPE_PREFIX + slug,
        title=HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        **extensions,
    )


def _field_error(error: Any) -> FieldError:
    loc = [part if isinstance(part, int) else str(part) for part in error.get("loc", ())]
    msg = str(error.get("msg", "invalid"))
    kind = str(error.get("type", "value_error"))
    if kind == "json_invalid":
        reason = (error.get("ctx") or {}).get("error") or "cannot parse it"
        at = f" at character {loc[1]}" if len(loc) > 1 and isinstance(loc[1], int) else ""
        msg = f"the body is not valid JSON: {reason}{at}"
        loc = ["body"]
    elif kind == "extra_forbidden":
        msg = "unknown field (the request model forbids fields it does not define)"
    return FieldError(loc=loc, msg=msg, type=kind)


def _describe(error: FieldError) -> str:
    where = ".".join(str(part) for part in error.loc)
    return f"{where}: {error.msg}" if where else error.msg


__all__ = [
    "PROBLEM_MEDIA_TYPE",
    "FieldError",
    "Problem",
    "problem_for",
    "problem_handler",
    "problem_responses",
]
