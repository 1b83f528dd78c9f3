"""Private PostgreSQL clusters for tests that stop or restart the server, or that need a server set up
in a way the shared one is not (a streaming replica, two-phase commit): initdb as user postgres into
a temporary folder, its own port. The shared test server is never stopped, restarted or reconfigured.

- ``private_server``: a fixture, one cluster;
- ``private_cluster(settings)`` and ``standby_of(primary, settings)``: context managers, a cluster
  and a streaming replica of it made with ``pg_basebackup -R``; each is stopped and its folder
  removed when the block ends, whatever happened in it.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass
class PrivateServer:
    bin: Path
    data: Path
    sockets: Path
    port: int
    settings: Mapping[str, str] = field(default_factory=dict)  # -c name=value, on every start

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url_of(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def pg_ctl(self, *args: str) -> None:
        _as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-s", *args)

    def _options(self) -> str:
        settings = "".join(f" -c {name}={value}" for name, value in self.settings.items())
        return f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 -F{settings}"

    def start(self) -> None:
        self.pg_ctl("-l", str(self.data / "server.log"), "-o", self._options(), "-w", "start")

    def stop(self) -> None:
        self.pg_ctl("-m", "fast", "-w", "stop")

    def restart(self) -> None:
        """A fast restart (every session ended, as at a failover or an upgrade); returns once it answers."""
        self.pg_ctl("-l", str(self.data / "server.log"), "-o", self._options(), "-m", "fast", "-w", "restart")

    def log(self) -> str:
        """The server's log, for a failing test's message."""
        path = self.data / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _as_postgres(*command: str) -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", *command], check=True, capture_output=True, timeout=60)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _binaries() -> Path:
    """The newest installed PostgreSQL's bin folder (skips the test when it cannot run clusters)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found or os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs PostgreSQL's initdb and pg_ctl, root and runuser to run a private cluster")
    return Path(found[-1]).parent


@contextmanager
def _folder(prefix: str) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix=prefix))  # not tmp_path: user postgres must reach it
    shutil.chown(root, "postgres")
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _running(server: PrivateServer) -> Iterator[PrivateServer]:
    try:
        server.start()
        yield server
    finally:
        subprocess.run(["runuser", "-u", "postgres", "--", str(server.bin / "pg_ctl"), "-D", str(server.data),
                        "-m", "immediate", "-w", "stop"], capture_output=True, timeout=60)  # fmt: skip


@contextmanager
def private_cluster(settings: Mapping[str, str] | None = None) -> Iterator[PrivateServer]:
    """A new cluster (trust authentication, replication connections allowed from 127.0.0.1)."""
    binaries = _binaries()
    with _folder("jobq-private-pg-") as root:
        server = PrivateServer(binaries, root / "data", root, _free_port(), dict(settings or {}))
        _as_postgres(str(server.bin / "initdb"), "-D", str(server.data), "-U", "postgres", "-A", "trust", "--no-sync")
        with _running(server):
            yield server


@contextmanager
def standby_of(primary: PrivateServer, settings: Mapping[str, str] | None = None) -> Iterator[PrivateServer]:
    """A streaming replica of ``primary``: ``pg_basebackup -R`` (which writes primary_conninfo and
    standby.signal), started as a hot standby on a port of its own. ``settings`` are the standby's
    own (``hot_standby_feedback``, ``max_standby_streaming_delay``), written to its
    postgresql.auto.conf, so that ALTER SYSTEM and a reload can change them (a -c option could not)."""
    with _folder("jobq-private-standby-") as root:
        standby = PrivateServer(primary.bin, root / "data", root, _free_port())
        _as_postgres(str(primary.bin / "pg_basebackup"), "-D", str(standby.data), "-h", "127.0.0.1",
                     "-p", str(primary.port), "-U", "postgres", "-R", "-X", "stream", "-c", "fast", "-N")  # fmt: skip
        with (standby.data / "postgresql.auto.conf").open("a") as conf:  # values are ours: no quotes inside
            conf.writelines(f"{name} = '{value}'\n" for name, value in (settings or {}).items())
        with _running(standby):
            yield standby


@pytest.fixture
def private_server() -> Iterator[PrivateServer]:
    with private_cluster() as server:
        yield server
