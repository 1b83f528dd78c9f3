"""Large results through the API (issue 26): streamed from the database in chunks with a
Content-Length, so the API's memory does not grow with a result's size times its readers."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from service.config import Settings
from service.jobs import NewJob
from service.store import Store, open_store
from tests.api.conftest import REPO, LiveApi, free_port

MAX_RESULT = 8 * 1_048_576
"""The configured bound in these tests; a result at it is what readers fetch."""


def _succeeded(store: Store, result: object, kind: str = "big") -> str:
    job = store.enqueue(NewJob(kind=kind))
    [claimed] = store.claim("writer", ["default"], 1, 60)
    store.complete(claimed.lease, result)
    return str(job.id)


def test_a_result_is_streamed_with_its_content_length(api: LiveApi, owner_store: Store) -> None:
    result = {"text": "caf\u00e9 " * 300_000, "n": [1, None]}  # a few chunks, multi-byte text across their edges
    owner_store.enqueue(NewJob(kind="big", tenant="acme"))
    [claimed] = owner_store.claim("writer", ["default"], 1, 60)
    owner_store.complete(claimed.lease, result)

    answer = api.http(api.token("acme")).get(f"/v1/jobs/{claimed.id}/result")

    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    assert int(answer.headers["content-length"]) == len(answer.content)
    assert "transfer-encoding" not in answer.headers
    assert answer.json() == {"job_id": str(claimed.id), "result": result}


def _rss_peak(pid: int) -> int:
    """The process's peak resident memory (VmHWM) in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


@pytest.fixture
def serve(pg_url: str) -> Iterator[tuple[str, int]]:
    """`jobq serve` as its own process (auth off), on the test's PostgreSQL database."""
    port = free_port()
    env = {**os.environ, "JOBQ_DATABASE_URL": pg_url, "JOBQ_AUTH": "off", "JOBQ_MAX_RESULT_BYTES": str(MAX_RESULT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--port", str(port)],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "jobq serve did not start"
        time.sleep(0.1)
    try:
        yield url, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_eight_concurrent_reads_of_a_maximum_result_add_less_than_twice_its_size(
    pg_url: str, serve: tuple[str, int]
) -> None:
    url, pid = serve
    store = open_store(Settings(database_url=pg_url, max_result_bytes=MAX_RESULT))
    try:
        text = "x" * (MAX_RESULT - len('{"text":""}'))
        big = _succeeded(store, {"text": text})
        small = _succeeded(store, {"text": "warm"}, kind="small")
    finally:
        store.close()
    with httpx.Client(base_url=url, timeout=120) as http:
        for _ in range(3):  # every code path of a read loaded and warm before the baseline
            assert http.get(f"/v1/jobs/{small}/result").status_code == 200
    before = _rss_peak(pid)

    sizes: list[int] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            with (
                httpx.Client(base_url=url, timeout=120) as http,
                http.stream("GET", f"/v1/jobs/{big}/result") as answer,
            ):
                assert answer.status_code == 200
                received = 0
                for piece in answer.iter_bytes():
                    received += len(piece)
                    time.sleep(0.001)  # a reader a little slower than the database
                assert received == int(answer.headers["content-length"])
                sizes.append(received)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(8)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(180)
    assert not errors, errors
    assert len(sizes) == 8 and min(sizes) > MAX_RESULT  # every reader got the whole answer

    grown = _rss_peak(pid) - before
    assert grown < 2 * MAX_RESULT, f"8 concurrent reads grew the API's peak RSS by {grown / 1_048_576:.1f} MiB"


def test_the_readme_states_the_result_bound_and_where_large_artefacts_go() -> None:
    readme = (REPO / "README.md").read_text()
    assert "JOBQ_MAX_RESULT_BYTES" in readme
    assert "16 MiB" in readme
    assert "reference" in readme  # …keep large artefacts elsewhere, with a reference in the result
