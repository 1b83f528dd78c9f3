"""The submit's fast path: a plain ``POST /v1/jobs`` answered without FastAPI's machinery.

A submit through FastAPI pays for route matching, a dozen dependencies solved, the
token's lookup and the insert as two thread hand-offs and two statements, and the
answer validated again: about 1.5 ms of the API's CPU for one INSERT (bench submit). This layer
(asked by ``JobqApi.__call__`` after the status poll's fast path) takes the common
submit itself, with what the route uses: the same request model
(:class:`~service.api.schemas.JobSubmit`, validated from ``json.loads`` of the body as
FastAPI validates it), :func:`service.api.auth.identify` for the token, the same store
call (``enqueue_many`` with the token's hash, which applies the idempotency rule), the
same answer (:func:`service.api.answers.submitted`, which the route returns too) and
:func:`service.api.problems.problem_for` for its errors. The token's lookup and the
insert are one store call (one statement on PostgreSQL), in the route as here, so every
submit is authenticated against the token table as it stands, and a revoked token is
refused at once. What this entrance adds is only the company: the submits that arrive
together share that call, its thread hand-off and its commit
(:class:`service.api.coalesce.CoalescedSubmits`), as concurrent polls share a read.

It reads the body only when the headers describe a request the route would parse
as JSON (``Content-Type: application/json``, a ``Content-Length`` within the
body cap, no query string, a well-formed bearer token and Idempotency-Key). Every
request it does not answer goes to the FastAPI app unchanged, with the body it read
handed on as it came: one that is not JSON or not a valid job (the route's 422 says
what is wrong), and a header out of bounds. Once the store has been asked to insert,
it answers every outcome itself, as the route would: the 401 of an unknown or revoked
token, the 422 of a job the store refuses, a 409 for a key used for another job, a 503.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from starlette.datastructures import State
from starlette.types import Message, Receive, Scope, Send

from service.api.answers import submitted
from service.api.auth import DEFAULT_TENANT, identify, unauthorized
from service.api.coalesce import Submit
from service.api.problems import problem_for, problem_response
from service.api.schemas import JobSubmit
from service.errors import Unauthorized
from service.payloads import MAX_KEY_LENGTH, submit_body_limit

# As FastAPI decides that a body is JSON (an application/json media type; +json types go to the route).
_JSON_MEDIA_TYPE = re.compile(rb"application/json[ \t]*(;.*)?", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class _Heads:
    """What a plain submit's headers say (the first of each, as Starlette's Headers.get reads them)."""

    authorization: str | None
    length: int
    key: str | None


def _plain_submit(scope: Scope, body_limit: int) -> _Heads | None:
    """The headers of a submit the route would read as a JSON body within its cap (``body_limit``), or None."""
    if scope.get("query_string"):
        return None
    found: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        if name == b"transfer-encoding":
            return None
        found.setdefault(name, value)
    content_type, length, key = found.get(b"content-type"), found.get(b"content-length"), found.get(b"idempotency-key")
    if (
        content_type is None
        or not _JSON_MEDIA_TYPE.fullmatch(content_type)
        or length is None
        or not length.isdigit()
        or not 0 < int(length) <= body_limit
        or (key is not None and not 0 < len(key) <= MAX_KEY_LENGTH)
    ):
        return None
    authorization = found.get(b"authorization")
    return _Heads(
        authorization.decode("latin-1") if authorization is not None else None,
        int(length),
        key.decode("latin-1") if key is not None else None,
    )


class SubmitFastPath:
    def __init__(self, state: State) -> None:
        self.state = state  # the FastAPI app's state: settings, clock, submits (once started)

    async def answer(self, scope: Scope, receive: Receive, send: Send) -> Receive | None:
        """None if this was a plain submit and it has been answered; otherwise the ``receive``
        the app must read the request with (the body this read, then the rest)."""
        if not (scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/v1/jobs"):
            return receive
        submits = getattr(self.state, "submits", None)
        settings = getattr(self.state, "settings", None)
        if submits is None or settings is None:
            return receive
        heads = _plain_submit(scope, submit_body_limit(settings.max_body_bytes))
        if heads is None:
            return receive
        try:
            caller = identify(heads.authorization, settings.auth)
        except Unauthorized:  # the route answers the 401
            return receive

        messages: list[Message] = []
        size = 0
        while not messages or messages[-1].get("more_body", False):
            messages.append(await receive())
            if messages[-1]["type"] != "http.request":  # the client left: nobody to answer
                return None
            size += len(messages[-1].get("body", b""))
            if size > heads.length:  # more than it declared: the route's body cap decides
                return _replaying(messages, receive)
        body = b"".join(m.get("body", b"") for m in messages)
        try:
            request = JobSubmit.model_validate(json.loads(body))
        except (ValueError, RecursionError):  # not JSON, or not a valid job (ValidationError is a ValueError):
            # the route answers what is wrong with it
            return _replaying(messages, receive)

        if request.depends_on:  # a workflow's job goes alone, through the route: never coalesced with others
            return _replaying(messages, receive)
        # The store puts the job in the token's tenant, when there is a token.
        job = request.to_new_job(caller.tenant or DEFAULT_TENANT, heads.key)
        now = self.state.clock()
        try:
            status = await submits.enqueue(Submit(job, caller.token_hash, len(body)))
        except Unauthorized:
            await _problem(unauthorized(), scope, receive, send)
            return None
        except Exception as exc:  # noqa: BLE001 - as the route's problem handler answers it (422, 409, 503, 500)
            await _problem(exc, scope, receive, send)
            return None

        await submitted(status, now).send(send)
        return None


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that hands out the messages already read, then reads on."""
    pending = list(messages)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay


async def _problem(exc: BaseException, scope: Scope, receive: Receive, send: Send) -> None:
    problem, headers = problem_for(exc)
    await problem_response(problem, headers)(scope, receive, send)
