"""A private PostgreSQL cluster for tests that stop or restart the server: initdb as user postgres
into a temporary folder, its own port. The shared test server is never stopped or restarted."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


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

    def restart(self) -> None:
        """A fast restart (every session ended, as at a failover or an upgrade); returns once it answers."""
        options = f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 -F"
        self.pg_ctl("-l", str(self.data / "server.log"), "-o", options, "-m", "fast", "-w", "restart")


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
