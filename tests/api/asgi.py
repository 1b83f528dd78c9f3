"""Calling the API's ASGI app directly (no server): what the app itself answers, to the byte
(AsgiClient: the fast paths' tests compare the app with and without a fast path through it), or
through httpx without a socket (AsgiHttp: many requests, with cookies, for the property tests).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI

from service.api.app import JobqApi
from service.app import create_app
from service.config import Settings
from service.store import Store
from service.tokens import hash_token, new_token
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


class AsgiHttp:
    """A synchronous client of the app's ASGI callable (httpx's ASGITransport, no server and no
    socket), on an event loop of its own that runs while a request does; the app's lifespan
    (the store, the coalescers) started on it."""

    def __init__(self, app: JobqApi, *, raise_app_exceptions: bool = True) -> None:
        """``raise_app_exceptions=False``: an exception the app did not handle is its 500, not raised here."""
        self._loop = asyncio.new_event_loop()
        self._lifespan = app.router.lifespan_context(app)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_app_exceptions)
        self._client = httpx.AsyncClient(transport=transport, base_url="http://testserver")

    def __enter__(self) -> AsgiHttp:
        self._loop.run_until_complete(self._lifespan.__aenter__())
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.run_until_complete(self._client.aclose())
        self._loop.run_until_complete(self._lifespan.__aexit__(None, None, None))
        self._loop.close()

    def request(self, method: str, url: str, *, chunked: bool = False, **kwargs: Any) -> httpx.Response:
        """``chunked``: the ``content`` is sent as a stream, without a Content-Length."""
        if chunked:
            whole = kwargs.pop("content")

            async def stream() -> AsyncIterator[bytes]:
                yield whole

            kwargs["content"] = stream()
        return self._loop.run_until_complete(self._client.request(method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)


def log_in_operator(http: AsgiHttp, store: Store) -> None:
    """A console session on ``http``: an admin token made as `jobq token create --admin` makes
    one, logged in through the login form (its CSRF token first)."""
    token = new_token()
    store.create_token("", hash_token(token), "alice", admin=True)
    page = http.get("/ui/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf, page.text
    assert http.post("/ui/login", data={"csrf": csrf.group(1), "token": token}).status_code == 303
