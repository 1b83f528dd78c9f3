"""The submit's fast path: a plain ``POST /v1/jobs`` answered without FastAPI's machinery.

A submit through FastAPI pays for route matching, a dozen dependencies solved, the
token's lookup and the insert as two thread hand-offs and two statements, and the
answer validated again: about 1.5 ms of the API's CPU for one INSERT. This layer
(asked by ``JobqApi.__call__`` after the status poll's fast path) takes the common
submit itself, with what the route uses: the same request model
(:class:`~service.api.schemas.JobSubmit`, validated from ``json.loads`` of the body as
FastAPI validates it), :func:`service.api.auth.identify` for the token, the idempotency
rule of :func:`service.api.routes.require_same_request`, :func:`JobOut.of` and
``poll_after_seconds`` for the answer, :func:`service.api.problems.problem_for` for
its errors. The token's lookup and the insert are one store call (``enqueue`` with
the token's hash: one statement on PostgreSQL), so every submit is authenticated
against the token table as it stands, and a revoked token is refused at once.

It reads the body only when the headers describe a request the route would parse
as JSON (``Content-Type: application/json``, a ``Content-Length`` within the
body cap, no query string, a well-formed bearer token and Idempotency-Key). Every
request it does not answer goes to the FastAPI app unchanged, with the body it read
handed on as it came: one that is not JSON or not a valid job (the route's 422 says
what is wrong), a header out of bounds, and a job the store refuses as invalid
(nothing was written; the route reads the token first, as it always does). Once the
store has been asked to insert, it answers every outcome itself, as the route would:
the 401 of an unknown or revoked token, a 409 for a key used for another job, a 503.
"""

from __future__ import annotations

import json
import re

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import State
from starlette.types import Message, Receive, Scope, Send

from service.api.auth import DEFAULT_TENANT, identify, unauthorized
from service.api.polling import poll_after_seconds
from service.api.problems import problem_for, problem_response
from service.api.routes import require_same_request
from service.api.schemas import JOB_OUT, JobSubmit
from service.errors import InvalidInput, Unauthorized
from service.status import JobOut, job_url

# As FastAPI decides that a body is JSON (an application/json media type; +json types go to the route).
_JSON_MEDIA_TYPE = re.compile(rb"application/json[ \t]*(;.*)?", re.IGNORECASE | re.DOTALL)
_MAX_KEY_CHARS = 255  # the route's Idempotency-Key bounds: 1 to 255 characters


class SubmitFastPath:
    def __init__(self, state: State) -> None:
        self.state = state  # the FastAPI app's state: settings, clock, store (once started)

    async def answer(self, scope: Scope, receive: Receive, send: Send) -> Receive | None:
        """None if this was a plain submit and it has been answered; otherwise the ``receive``
        the app must read the request with (the body this read, then the rest)."""
        if not (scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/v1/jobs"):
            return receive
        store = getattr(self.state, "store", None)
        settings = getattr(self.state, "settings", None)
        if store is None or settings is None or scope.get("query_string"):
            return receive
        authorization = content_type = content_length = key = None
        for name, value in scope["headers"]:  # the first of each, as Starlette's Headers.get reads them
            if name == b"authorization":
                authorization = value if authorization is None else authorization
            elif name == b"content-type":
                content_type = value if content_type is None else content_type
            elif name == b"content-length":
                content_length = value if content_length is None else content_length
            elif name == b"idempotency-key":
                key = value if key is None else key
            elif name == b"transfer-encoding":
                return receive
        if (
            content_type is None
            or not _JSON_MEDIA_TYPE.fullmatch(content_type)
            or content_length is None
            or not content_length.isdigit()
            or not 0 < int(content_length) <= settings.max_body_bytes
            or (key is not None and not 0 < len(key) <= _MAX_KEY_CHARS)
        ):
            return receive
        try:
            caller = identify(authorization.decode("latin-1") if authorization is not None else None, settings.auth)
        except Unauthorized:  # the route answers the 401
            return receive

        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":  # the client left: nobody to answer
                return None
            size += len(message.get("body", b""))
            if size > int(content_length):  # more than it declared: the route's body cap decides
                return _replaying(messages, receive)
            if not message.get("more_body", False):
                break
        try:
            request = JobSubmit.model_validate(json.loads(b"".join(m.get("body", b"") for m in messages)))
        except (ValueError, RecursionError):  # not JSON, or not a valid job (ValidationError is a ValueError):
            # the route answers what is wrong with it
            return _replaying(messages, receive)

        job = request.to_new_job(  # the store puts the job in the token's tenant, when there is a token
            caller.tenant or DEFAULT_TENANT, key.decode("latin-1") if key is not None else None
        )
        now = self.state.clock()
        try:
            status = await run_in_threadpool(store.enqueue, job, token_hash=caller.token_hash)
        except InvalidInput:  # nothing was written; the route checks the token first, then refuses it
            return _replaying(messages, receive)
        except Unauthorized:
            await _problem(unauthorized(), scope, receive, send)
            return None
        except Exception as exc:  # noqa: BLE001 - answered as the route's problem handler answers it
            await _problem(exc, scope, receive, send)
            return None
        try:
            if job.idempotency_key is not None:
                await require_same_request(store, job, status)
        except Exception as exc:  # noqa: BLE001 - as above: a 409 for another job's key, a 503
            await _problem(exc, scope, receive, send)
            return None

        hint = poll_after_seconds(status, now)
        body = JOB_OUT.dump_json(JobOut.of(status, hint))
        headers = [
            (b"content-length", str(len(body)).encode("latin-1")),
            (b"content-type", b"application/json"),
            (b"location", job_url(status.id).encode("latin-1")),
        ]
        if hint is not None:
            headers.append((b"retry-after", str(hint).encode("latin-1")))
        await send({"type": "http.response.start", "status": 202, "headers": headers})
        await send({"type": "http.response.body", "body": body})
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
