"""The submit bench's ceiling: a bare ASGI app that stores a submitted job with psycopg, nothing else.

    JOBQ_DATABASE_URL=postgresql://… python -m uvicorn bench.bare_submit:app

What one uvicorn process does on this machine when a submit is only its database work:
read the body, hash the bearer token, one INSERT that takes the job only for a live
token (the same row, index entries and wake-up NOTIFY as jobq's submit), a fixed-shape
answer. No validation, no framework, no thread: an async psycopg pool of
``JOBQ_API_POOL_SIZE`` connections (jobq serve's default, 4). jobq's ``POST /v1/jobs``
can only be slower; the bench reports it against this.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from psycopg_pool import AsyncConnectionPool

from service.jobs import new_job_id

INSERT = """
INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                  max_attempts_default, done, run_after, created_at, updated_at)
SELECT %(id)s, t.tenant, %(queue)s, %(kind)s, %(payload)s::jsonb, 'queued', 0, 0, 3, true, 0, now(), now(), now()
FROM api_tokens AS t
WHERE t.token_hash = %(token_hash)s AND t.revoked_at IS NULL AND NOT t.admin
RETURNING created_at, pg_notify('jobq_jobs', queue)
"""

_pool: AsyncConnectionPool | None = None


async def _body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _answer(send: Any, status: int, body: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json"), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    global _pool
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                size = int(os.environ.get("JOBQ_API_POOL_SIZE", "4"))
                _pool = AsyncConnectionPool(
                    os.environ["JOBQ_DATABASE_URL"],
                    min_size=size,
                    max_size=size,
                    kwargs={"autocommit": True},
                    open=False,
                )
                await _pool.open(wait=True)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if _pool is not None:
                    await _pool.close()
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    if scope["method"] == "GET":  # the bench's readiness probe (/healthz)
        await _answer(send, 200, b'{"status":"ok"}')
        return
    request = json.loads(await _body(receive))
    token = b""
    for name, value in scope["headers"]:
        if name == b"authorization":
            token = value.partition(b" ")[2]
    job_id = new_job_id()
    assert _pool is not None
    async with _pool.connection() as conn:
        cursor = await conn.execute(
            INSERT,
            {
                "id": job_id,
                "queue": request.get("queue", "default"),
                "kind": request["kind"],
                "payload": json.dumps(request.get("payload", {})),
                "token_hash": hashlib.sha256(token).hexdigest(),
            },
        )
        row = await cursor.fetchone()
    if row is None:
        await _answer(send, 401, b'{"title":"Unauthorized"}')
        return
    body = json.dumps({"job_id": str(job_id), "state": "queued", "created_at": row[0].isoformat()}).encode()
    await _answer(send, 202, body, ((b"location", f"/v1/jobs/{job_id}".encode()),))
