"""`jobq serve` stops promptly with a long poll in flight: the poll answers the job as it stands
(with Retry-After, so the client asks again, of another process) and the process exits within a
few seconds, well inside compose's 15 s stop_grace_period and Kubernetes' 30 s grace."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from service.config import Settings
from service.jobs import NewJob
from service.store import open_store
from service.tokens import hash_token, new_token
from tests.api.conftest import REPO, free_port


@pytest.fixture
def served(store_url: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--port", str(port)],
        env={**os.environ, "JOBQ_DATABASE_URL": store_url},
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "jobq serve did not become ready"
        time.sleep(0.1)
    yield process, base
    if process.poll() is None:
        process.kill()
    process.communicate(timeout=30)


def test_sigterm_answers_a_long_poll_at_once_and_the_api_exits_within_seconds(
    served: tuple[subprocess.Popen[str], str], store_url: str
) -> None:
    process, base = served
    token = new_token()
    store = open_store(Settings(database_url=store_url))
    try:
        store.create_token("acme", hash_token(token), name="shutdown")
        job = store.enqueue(NewJob(kind="sleep", payload={}, tenant="acme"))  # no worker: it stays queued
    finally:
        store.close()

    answers: list[httpx.Response] = []

    def long_poll() -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            answers.append(http.get(f"/v1/jobs/{job.id}", params={"wait": 30}))

    poller = threading.Thread(target=long_poll)
    poller.start()
    time.sleep(1.5)  # the poll is waiting in the server (its first read took milliseconds)
    assert poller.is_alive() and not answers

    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    poller.join(timeout=10)
    answered_after = time.monotonic() - signalled
    code = process.wait(timeout=30)
    exited_after = time.monotonic() - signalled

    assert answers, "the long poll got no answer"
    response = answers[0]
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "queued" and response.headers["Retry-After"] == "1"
    assert answered_after < 2, f"the poll was answered {answered_after:.1f} s after SIGTERM"
    assert code in (0, -signal.SIGTERM)
    assert exited_after < 5, f"the API took {exited_after:.1f} s to exit"
