"""API test fixtures: the real app under a real uvicorn on a free port, real databases.

- ``start_api(url, clock=None, **settings)``: a running API on ``url``'s database
  (auth on unless ``auth=False``), stopped after the test. Returns a :class:`LiveApi`.
- ``api``: ``start_api(store_url)``, so a test that takes it runs on SQLite and PostgreSQL.
- ``LiveApi.token(tenant)``: a fresh API token of that tenant (made the way
  ``jobq token create`` makes one); ``LiveApi.http(token)``: an httpx client for it.
- ``start_worker(url)``: ``python -m service worker --app service.examples`` as a
  subprocess on that database, stopped (SIGTERM) after the test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from service.app import create_app
from service.config import Settings
from service.store import Store, open_store
from service.tokens import hash_token, new_token

REPO = Path(__file__).resolve().parents[2]


@dataclass
class LiveApi:
    url: str
    app: FastAPI
    settings: Settings
    server: uvicorn.Server
    thread: threading.Thread
    sock: socket.socket
    _clients: list[httpx.Client] = field(default_factory=list)

    @property
    def store(self) -> Store:
        """The app's own store (its pool), for arranging a test's world."""
        store: Store = self.app.state.store
        return store

    def token(self, tenant: str = "acme") -> str:
        token = new_token()
        self.store.create_token(tenant, hash_token(token), name="test")
        return token

    def http(self, token: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=kwargs.pop("timeout", 40.0), **kwargs)
        self._clients.append(client)
        return client

    def stop(self) -> None:
        for client in self._clients:
            client.close()
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.sock.close()
        assert not self.thread.is_alive(), "the API server did not stop"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_api(settings: Settings, clock: Callable[[], datetime] | None = None) -> LiveApi:
    app = create_app(settings, clock=clock)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="api-under-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the API server did not start")
        time.sleep(0.01)
    return LiveApi(url=f"http://127.0.0.1:{port}", app=app, settings=settings, server=server, thread=thread, sock=sock)


@pytest.fixture
def start_api() -> Iterator[Callable[..., LiveApi]]:
    started: list[LiveApi] = []

    def start(url: str, clock: Callable[[], datetime] | None = None, **settings: Any) -> LiveApi:
        api = run_api(Settings(database_url=url, **settings), clock=clock)
        started.append(api)
        return api

    yield start
    for api in reversed(started):
        api.stop()


@pytest.fixture
def api(start_api: Callable[..., LiveApi], store_url: str) -> LiveApi:
    return start_api(store_url)


@pytest.fixture
def owner_store(store_url: str) -> Iterator[Store]:
    """A store of the test's own, beside the API's (no pinned clock): the worker's view."""
    store = open_store(Settings(database_url=store_url))
    yield store
    store.close()


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(url: str, *extra: str) -> WorkerProcess:
        log = tmp_path / f"worker-{len(started)}.log"
        env = {**os.environ, "JOBQ_DATABASE_URL": url, "PYTHONUNBUFFERED": "1"}
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "service", "worker", "--app", "service.examples", *extra],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        worker = WorkerProcess(process, log)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
            try:
                worker.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
