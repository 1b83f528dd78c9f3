"""The request body cap: counts the bytes as they stream in, not what a header claims.

A declared ``Content-Length`` over the cap is answered with 413 before a byte of
the body is read. A body without one (chunked) or with a false one is counted
message by message; the moment the count passes the cap, reading stops and the
request ends in 413. Either way the handler never runs, so nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.problems import problem_for, problem_response


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when the streamed body passes the cap.

    An HTTPException, because FastAPI re-raises those from its body reading
    unchanged (anything else becomes a 400); the app's problem handler turns it
    into a 413 problem.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(
            status_code=413,
            detail=f"the request body is over the limit of {limit} bytes; nothing was written "
            "(send less, split a batch, or raise JOBQ_MAX_BODY_BYTES)",
        )


class BodySizeLimit:
    """Pure ASGI middleware: a byte cap per request body, a larger one for some paths."""

    def __init__(self, app: ASGIApp, *, limit: int, limits_by_path: Mapping[str, int] | None = None) -> None:
        self.app = app
        self.limit = limit
        self.limits_by_path = dict(limits_by_path or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits_by_path.get(scope.get("path", ""), self.limit)
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            problem, headers = problem_for(BodyTooLarge(limit))
            await problem_response(problem, headers)(scope, receive, send)
            return

        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counting_receive, send)
