"""Calling the API's ASGI app directly (no server, no HTTP client): what the app itself answers,
to the byte. The fast paths' tests compare the app with and without a fast path through it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI

from service.api.app import JobqApi
from service.app import create_app
from service.config import Settings
from tests.conftest import FakeClock

Headers = dict[str, str] | Sequence[tuple[bytes, bytes]]


@dataclass
class Answer:
    status: int
    headers: list[tuple[bytes, bytes]]  # sorted: the order of headers is not part of an answer
    body: bytes


class AsgiClient:
    def __init__(self, app: FastAPI) -> None:
        self.app = app

    async def get(self, target: str, headers: Headers | None = None) -> Answer:
        return await self.request("GET", target, headers)

    async def post(self, target: str, body: bytes, headers: Headers | None = None, *, chunks: int = 1) -> Answer:
        """``chunks``: the body arrives in that many ``http.request`` messages."""
        return await self.request("POST", target, headers, body, chunks=chunks)

    async def request(
        self, method: str, target: str, headers: Headers | None = None, body: bytes = b"", *, chunks: int = 1
    ) -> Answer:
        path, _, query = target.partition("?")
        raw = headers.items() if isinstance(headers, dict) else headers or []
        given = [(k.lower().encode(), v.encode()) if isinstance(k, str) else (k, v) for k, v in raw]  # type: ignore[union-attr]
        if body and not any(name in (b"content-length", b"transfer-encoding") for name, _ in given):
            given.append((b"content-length", str(len(body)).encode()))  # as an HTTP client sends it
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
            "state": {},
            "headers": [(b"host", b"test"), *given],
        }
        step = max(1, -(-len(body) // chunks))
        pieces = [body[i : i + step] for i in range(0, len(body), step)] or [b""]
        messages = [
            {"type": "http.request", "body": piece, "more_body": i < len(pieces) - 1} for i, piece in enumerate(pieces)
        ]
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        try:
            await self.app(scope, receive, send)
        except Exception:  # noqa: BLE001 - Starlette re-raises an error it answered with a 500, for the server to log
            if not any(m["type"] == "http.response.body" and not m.get("more_body") for m in sent):
                raise
        start = next(m for m in sent if m["type"] == "http.response.start")
        answer = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return Answer(start["status"], sorted(start["headers"]), answer)


@asynccontextmanager
async def asgi_client(
    url: str, clock: FakeClock, *, auth: bool = True, fast_poll: bool = True, fast_submit: bool = True
) -> AsyncIterator[tuple[AsgiClient, JobqApi]]:
    """The app on ``url``'s database, started (its lifespan), with or without each fast path."""
    app = create_app(Settings(database_url=url, auth=auth), clock=clock)
    if not fast_poll:
        app.fast_poll = None
    if not fast_submit:
        app.fast_submit = None
    async with app.router.lifespan_context(app):
        yield AsgiClient(app), app
