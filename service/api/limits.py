"""The request body cap: counts the bytes as they stream in, not what a header claims.

A declared ``Content-Length`` over the cap is refused before the handler runs; a body
without one (chunked) or with a false one is counted message by message, and refused
the moment the count passes the cap. Either way the handler never runs, so nothing is
written, and the answer is a 413 problem.

Every such body gets its answer. A server that answers while the client is still
sending, and then closes (the client sent ``Connection: close``, or the server is
stopping), closes on unread bytes: the kernel answers them with a reset, and the client
sees a broken pipe instead of its 413, which it cannot tell from an outage (issue 26).
So the rest of the body is read and dropped first, up to :data:`DRAIN_BYTES` past the
cap and for :data:`DRAIN_SECONDS` at most (a body larger than that, or a sender slower,
is answered and cut: draining must not become a way to hold the server). A client that
asked ``Expect: 100-continue`` has sent nothing yet and is answered at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.problems import problem_for, problem_response

DRAIN_BYTES = 64 * 1_048_576
"""How far past its cap a refused body is read (and dropped) so that its 413 arrives whole."""
DRAIN_SECONDS = 10.0
"""How long reading a refused body may take before the 413 is sent anyway."""


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when the streamed body passes the cap.

    An HTTPException, because FastAPI re-raises those from its body reading
    unchanged (anything else becomes a 400); the app's problem handler turns it
    into a 413 problem.
    """

    def __init__(self, limit: int, setting: str = "JOBQ_MAX_BODY_BYTES") -> None:
        super().__init__(
            status_code=413,
            detail=f"the request body is over the limit of {limit} bytes; nothing was written "
            f"(send less, split a batch, or raise {setting})",
        )


class BodySizeLimit:
    """Pure ASGI middleware: a byte cap per request body, a larger one for some paths."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: int,
        limits_by_path: Mapping[str, tuple[int, str]] | None = None,
    ) -> None:
        """``limit``: JOBQ_MAX_BODY_BYTES; ``limits_by_path``: a path's own cap and the setting
        that names it (the 413 tells the client which one to raise)."""
        self.app = app
        self.limit = limit
        self.limits_by_path = {path: cap for path, (cap, _setting) in (limits_by_path or {}).items()}
        self.settings_by_path = {path: setting for path, (_cap, setting) in (limits_by_path or {}).items()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        limit = self.limits_by_path.get(path, self.limit)
        setting = self.settings_by_path.get(path, "JOBQ_MAX_BODY_BYTES")
        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            if "100-continue" not in headers.get("expect", "").lower() and int(declared) <= limit + DRAIN_BYTES:
                await _drain(receive, 0, limit + DRAIN_BYTES)
            problem, problem_headers = problem_for(BodyTooLarge(limit, setting))
            await problem_response(problem, problem_headers)(scope, receive, send)
            return

        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    if message.get("more_body", False):
                        await _drain(receive, received, limit + DRAIN_BYTES)
                    raise BodyTooLarge(limit, setting)
            return message

        await self.app(scope, counting_receive, send)


async def _drain(receive: Receive, received: int, most: int) -> None:
    """Read and drop the rest of a refused body: until its end, ``most`` bytes in all, the
    client's disconnect, or DRAIN_SECONDS (see the module docstring)."""
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            while received <= most:
                message = await receive()
                if message["type"] != "http.request":
                    return
                received += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return
    except TimeoutError:
        return
