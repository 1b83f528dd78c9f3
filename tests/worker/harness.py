"""Real ``jobq worker`` processes for the fault tests, and small waiting helpers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEST_APP = "tests.worker.apps"
T = TypeVar("T")

# The suite runs on two xdist processes. A test of ten to fifty worker processes marked with this
# runs after, never beside, another so marked: two such fleets at once would want more connections
# than the shared server has (100; the idle fleet's forty workers hold about 60) and more CPU than
# their timing bounds were set for.
ONE_FLEET_AT_A_TIME = pytest.mark.xdist_group("fleets")


def wait_until(predicate: Callable[[], T], timeout: float, interval: float = 0.05, what: str = "condition") -> T:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class WorkerProcess:
    """``python -m service --database-url URL worker --app APP ARGS`` (APP: the test app), logs to a file."""

    def __init__(
        self,
        url: str,
        log_dir: Path,
        name: str,
        args: list[str],
        env: dict[str, str] | None = None,
        app: str = TEST_APP,
        prefix: Sequence[str] = (),
    ) -> None:
        """``prefix`` runs the worker through another command (``ip netns exec NS …``: tests/deploy)."""
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        command = [*prefix, sys.executable, "-m", "service", "--database-url", url, "worker", "--app", app, *args]
        environment = {**os.environ, "PYTHONPATH": str(ROOT), "JOBQ_RETRY_BASE_SECONDS": "0.2", **(env or {})}
        environment.pop("JOBQ_DATABASE_URL", None)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=ROOT
            )
        self._worker_id: str | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if name is None or event.get("event") == name:
                found.append(event)
        return found

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_started(self, timeout: float = 20.0) -> str:
        def started() -> str | None:
            if not self.alive():
                pytest.fail(f"worker {self.name} exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            events = self.events("worker.started")
            return events[0]["worker"] if events else None

        self._worker_id = wait_until(started, timeout, what=f"worker {self.name} to start")
        return self._worker_id

    @property
    def worker_id(self) -> str:
        if self._worker_id is None:
            return self.wait_started()
        return self._worker_id

    def signal(self, signum: int) -> None:
        if self.alive():
            self.proc.send_signal(signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> None:
        self.signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)


class Fleet:
    """Every worker a test starts; all of them are killed when the test ends."""

    def __init__(self, url: str, log_dir: Path) -> None:
        self.url = url
        self.log_dir = log_dir
        self.workers: list[WorkerProcess] = []

    def start(
        self, *args: str, url: str | None = None, env: dict[str, str] | None = None, prefix: Sequence[str] = ()
    ) -> WorkerProcess:
        name = f"worker{len(self.workers)}"
        worker = WorkerProcess(url or self.url, self.log_dir, name, list(args), env, prefix=prefix)
        self.workers.append(worker)
        return worker

    def __iter__(self) -> Iterator[WorkerProcess]:
        return iter(self.workers)

    def alive(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.alive()]

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop_all()

    def stop_all(self) -> None:
        for worker in self.workers:
            if worker.alive():
                worker.proc.send_signal(signal.SIGCONT)  # a stopped process dies of SIGKILL only once it runs
                worker.proc.kill()
        for worker in self.workers:
            try:
                worker.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
