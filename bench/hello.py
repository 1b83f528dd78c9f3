"""A constant JSON answer as a bare ASGI app: the poll bench's ceiling for one uvicorn process.

    python -m uvicorn bench.hello:app

What a Python HTTP server does on this machine when the request does nothing;
jobq's status poll (FastAPI, a token check, one query, a typed response) can only be slower.
"""

from __future__ import annotations

from typing import Any

BODY = b'{"job_id":"00000000-0000-0000-0000-000000000000","state":"running","done":0,"total":null}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
