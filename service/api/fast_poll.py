"""The status poll's fast path: a plain ``GET /v1/jobs/{id}`` answered without FastAPI's machinery.

Polling is what clients do most, and FastAPI's per-request work (route matching,
solving a dozen dependencies, validating the returned model again) costs a
status poll many times its one query. This ASGI middleware answers the common
case itself: the token read by :func:`service.api.auth.identify`, as the route reads it,
and the answer built by :func:`service.api.answers.polled`, which the route returns too:
one answer, two entrances. Its read is the store's ``read_statuses``
(the token and the job in one query), shared by the polls that arrive together
(:mod:`service.api.coalesce`).

It sits in front of the whole FastAPI app (``JobqApi.__call__`` asks it first),
so a poll it answers skips the middleware stack as well. It only ever answers a 200. Anything else goes to the FastAPI route unchanged:
a query string (``?wait=``, unknown parameters), an id not in the canonical
form, a missing or malformed token, and every failure of the read (unknown or
revoked token, no such job, the database away) — the route then reads again
and gives the error its usual problem answer.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from starlette.types import Scope, Send

from service.api.answers import Answer, polled
from service.api.auth import identify
from service.errors import Unauthorized
from service.jobs import StatusRead
from service.web import MAX_TAG_LENGTH

_PATH = re.compile(r"/v1/jobs/([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})")


class StatusPollFastPath:
    def __init__(self, state: Any) -> None:
        self.state = state  # the FastAPI app's state: settings, clock, status_reads (once started)

    async def answered(self, scope: Scope, send: Send) -> bool:
        """True if this was a plain poll it has answered; False leaves the request to the app."""
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("query_string"):
            found = _PATH.fullmatch(scope["path"])
            if found is not None:
                answer = await self._answer(scope, found.group(1))
                if answer is not None:
                    await answer.send(send)
                    return True
        return False

    async def _answer(self, scope: Scope, job_id: str) -> Answer | None:
        reads = getattr(self.state, "status_reads", None)
        settings = getattr(self.state, "settings", None)
        if reads is None or settings is None:
            return None
        authorization: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                if authorization is None:  # the first one, as Starlette's Headers.get reads it
                    authorization = value
            elif name == b"if-none-match" and len(value.decode("latin-1")) > MAX_TAG_LENGTH:
                return None  # the route's 422
        try:
            caller = identify(authorization.decode("latin-1") if authorization is not None else None, settings.auth)
        except Unauthorized:  # the route answers the 401
            return None
        request = StatusRead(uuid.UUID(job_id), tenant=caller.tenant, token_hash=caller.token_hash)
        status = await reads.read(request)
        if status is None:  # the route reads again and answers the error as it always does
            return None
        return polled(status, self.state.clock())
