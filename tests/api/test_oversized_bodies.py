"""Every oversized body gets its 413 problem (issue 26), whatever the client's sending pattern:
in one write, in slow chunks, chunked-encoded; against a real `jobq serve` process. A client
must never see a broken pipe or a reset where the server meant to answer: it cannot tell that
from an outage."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import REPO, free_port

LIMIT = 1_048_576  # JOBQ_MAX_BODY_BYTES's default
BODY = b'{"kind":"resize","payload":{"blob":"' + b"x" * (2 * LIMIT) + b'"}}'  # 2 MiB over, as in the issue
ROUNDS = 100


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[tuple[str, int]]:
    """`jobq serve` on a migrated SQLite file, auth off, for the whole module."""
    path = tmp_path_factory.mktemp("oversized") / "jobq.db"
    shutil.copy(sqlite_template, path)
    port = free_port()
    env = {**os.environ, "JOBQ_DATABASE_URL": f"sqlite:///{path}", "JOBQ_AUTH": "off"}
    process = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--port", str(port)],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "jobq serve did not start"
        time.sleep(0.1)
    try:
        yield "127.0.0.1", port
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Read one HTTP response (status, headers, body by Content-Length) from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65_536)
        if not piece:
            raise ConnectionError(f"closed before an answer: {data[:200]!r}")
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        piece = sock.recv(65_536)
        if not piece:
            raise ConnectionError("closed in the middle of the answer")
        body += piece
    return status, headers, body[:length]


def _post(address: tuple[str, int], send: Callable[[socket.socket], None], headers: str) -> str:
    """One POST /v1/jobs; what the client saw: "413" with the problem, or the error it met."""
    with socket.create_connection(address, timeout=30) as sock:
        try:
            # Connection: close, as urllib and many scripts send it: the server then closes after its
            # answer, and a body it had not read by then turns the close into a reset.
            sock.sendall(
                "POST /v1/jobs HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                f"Connection: close\r\n{headers}\r\n".encode()
            )
            send(sock)
            status, answer_headers, body = _answer(sock)
        except OSError as exc:
            return type(exc).__name__
    if status == 413 and answer_headers.get("content-type") == "application/problem+json":
        problem = json.loads(body)
        assert "JOBQ_MAX_BODY_BYTES" in problem["detail"], problem
        return "413"
    return f"HTTP {status}"


def _one_write(sock: socket.socket) -> None:
    sock.sendall(BODY)


def _slow_chunks(sock: socket.socket) -> None:
    for start in range(0, len(BODY), 131_072):
        sock.sendall(BODY[start : start + 131_072])
        time.sleep(0.002)


def _chunked(sock: socket.socket) -> None:
    for start in range(0, len(BODY), 65_536):
        piece = BODY[start : start + 65_536]
        sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
    sock.sendall(b"0\r\n\r\n")


@pytest.mark.parametrize(
    ("send", "headers"),
    [
        (_one_write, f"Content-Length: {len(BODY)}\r\n"),
        (_slow_chunks, f"Content-Length: {len(BODY)}\r\n"),
        (_chunked, "Transfer-Encoding: chunked\r\n"),
    ],
    ids=["one-write", "slow-chunks", "chunked"],
)
def test_every_oversized_body_gets_its_413_whatever_the_sending_pattern(
    server: tuple[str, int], send: Callable[[socket.socket], None], headers: str
) -> None:
    seen = [_post(server, send, headers) for _ in range(ROUNDS)]
    assert seen == ["413"] * ROUNDS, {outcome: seen.count(outcome) for outcome in set(seen)}
