"""A small HTTP/1.1 load client on asyncio streams: keep-alive connections, one request at a time each.

Written for the benches because a general client (httpx) spends about a
millisecond of Python per request, which on a 2-core machine would measure the
client more than the API. This one sends pre-built request bytes and reads
``Content-Length`` bodies; it understands exactly what uvicorn answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Response:
    status: int
    headers: dict[bytes, bytes]
    body: bytes


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int, host: str = "127.0.0.1") -> Connection:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 24)
        return cls(reader, writer)

    async def send(self, request: bytes) -> Response:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get(b"content-length", b"0"))
        body = await self.reader.readexactly(length) if length else b""
        return Response(status, headers, body)

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


def request(
    method: str,
    path: str,
    *,
    token: str | None = None,
    body: bytes | None = None,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: bench"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body is not None:
        lines += [f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


@dataclass
class LoadResult:
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)


async def run_load(
    port: int, clients: int, seconds: float, make_request: Callable[[int, int], bytes], max_requests: int | None = None
) -> LoadResult:
    """``clients`` connections, each sending ``make_request(client, n)`` back to back for ``seconds``."""
    result = LoadResult()
    connections = [await Connection.open(port) for _ in range(clients)]
    deadline = time.monotonic() + seconds
    budget = [max_requests if max_requests is not None else 1 << 62]

    async def client(index: int, conn: Connection) -> None:
        n = 0
        while time.monotonic() < deadline and budget[0] > 0:
            budget[0] -= 1
            data = make_request(index, n)
            n += 1
            sent = time.perf_counter()
            try:
                answer = await conn.send(data)
            except (ConnectionError, asyncio.IncompleteReadError):
                result.errors += 1
                conn = await Connection.open(port)
                continue
            result.latencies.append(time.perf_counter() - sent)
            result.statuses[answer.status] = result.statuses.get(answer.status, 0) + 1
            if answer.status >= 400:
                result.errors += 1

    began = time.perf_counter()
    await asyncio.gather(*(client(i, c) for i, c in enumerate(connections)))
    result.seconds = time.perf_counter() - began
    result.requests = len(result.latencies)
    for conn in connections:
        await conn.close()
    return result
