"""One ``store.unavailable``/``store.available`` pair per outage, with its true length, through a
real PostgreSQL stop and start. The server is a private cluster made for this test (initdb as
user postgres into a temporary folder, its own port): the shared test server is never stopped."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from service.store import migrate
from tests.worker.harness import WorkerProcess, wait_until

pytestmark = pytest.mark.slow


@dataclass
class PrivateServer:
    bin: Path
    data: Path
    sockets: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def pg_ctl(self, *args: str) -> None:
        _as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-s", *args)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 -F"
        self.pg_ctl("-l", str(self.data / "server.log"), "-o", options, "-w", "start")

    def stop(self) -> None:
        self.pg_ctl("-m", "fast", "-w", "stop")


def _as_postgres(*command: str) -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", *command], check=True, capture_output=True, timeout=60)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def private_server() -> Iterator[PrivateServer]:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found or os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs PostgreSQL's initdb and pg_ctl, root and runuser to run a private cluster")
    root = Path(tempfile.mkdtemp(prefix="jobq-private-pg-"))  # not tmp_path: user postgres must reach it
    shutil.chown(root, "postgres")
    server = PrivateServer(Path(found[-1]).parent, root / "data", root, _free_port())
    _as_postgres(str(server.bin / "initdb"), "-D", str(server.data), "-U", "postgres", "-A", "trust", "--no-sync")
    server.start()
    try:
        yield server
    finally:
        subprocess.run(["runuser", "-u", "postgres", "--", str(server.bin / "pg_ctl"), "-D", str(server.data),
                        "-m", "immediate", "-w", "stop"], capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


def test_a_server_stop_is_one_outage_with_its_true_length(private_server: PrivateServer, tmp_path: Path) -> None:
    migrate.upgrade(private_server.url)
    worker = WorkerProcess(
        private_server.url, tmp_path, "outage", ["--lease-seconds", "2", "--poll-seconds", "0.2"],
        app="service.examples",
    )  # fmt: skip
    try:
        worker.wait_started()
        private_server.stop()
        stopped = time.monotonic()
        wait_until(lambda: worker.events("store.unavailable"), 10, what="the worker to see the outage")
        time.sleep(3)  # maintenance ticks every 0.2 s and reaps every ~1 s meanwhile: none may end it
        assert not worker.events("store.available"), worker.log()
        private_server.start()
        back = wait_until(lambda: worker.events("store.available"), 30, what="the worker to see the database back")
        down_for = time.monotonic() - stopped
        time.sleep(1)  # a second pair, if any, would come within the next ticks
        assert len(worker.events("store.unavailable")) == 1 and len(worker.events("store.available")) == 1, worker.log()
        assert 3 <= back[0]["down_s"] <= down_for + 0.5, (back, down_for)
        assert worker.alive()
    finally:
        worker.terminate()
        assert worker.wait(30) == 0, worker.log()
