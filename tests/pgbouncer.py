"""A real PgBouncer of a test's own, in transaction mode, in front of the tests' PostgreSQL.

``PgBouncer.start(server_url, pool_size=…)`` writes a configuration to a directory of its
own and runs the ``pgbouncer`` binary (Debian's package; ``.ci/run`` installs it) in the
foreground on a free port: every database of the server, any user of it (``auth_type =
trust``: the user only has to be in the ``auth_file`` it writes, with the password of the
server URL, which PgBouncer then logs in to the server with). ``url(database_url)`` is a
database's URL through it. Nothing is set to make a client's life easier: no
``ignore_startup_parameters``, no ``max_prepared_statements`` (1.18 knows neither the latter
nor the session state transaction mode cannot keep), so jobq meets the pooler as it ships.

PgBouncer refuses to run as root ("PgBouncer should not run as root"): as root (CI) it is
started with ``-u nobody``, which it switches to after reading its files, so the directory
and the files are readable by everyone and it logs to stderr (a file the test owns), never
to a log file of its own.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from sqlalchemy.engine import make_url

SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer", path=SEARCH_PATH)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """One running PgBouncer; :meth:`stop` ends it (SIGTERM, then SIGKILL)."""

    def __init__(self, directory: Path, port: int, proc: subprocess.Popen[bytes], pool_size: int) -> None:
        self.directory = directory
        self.port = port
        self.proc = proc
        self.pool_size = pool_size

    @classmethod
    def start(cls, server_url: str, *, pool_size: int = 10, max_client_conn: int = 500) -> PgBouncer:
        binary = pgbouncer_binary()
        if binary is None:
            raise FileNotFoundError("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        server = make_url(server_url)
        directory = Path(tempfile.mkdtemp(prefix="jobq-pgbouncer-"))
        directory.chmod(0o755)  # read by `nobody` when run as root
        users = directory / "users.txt"
        users.write_text(f'"{server.username}" "{server.password or ""}"\n')
        for attempt in range(5):  # a free port may be taken between the look and the bind
            port = _free_port()
            config = directory / "pgbouncer.ini"
            config.write_text(
                "[databases]\n"
                f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}\n"
                "[pgbouncer]\n"
                "listen_addr = 127.0.0.1\n"
                f"listen_port = {port}\n"
                "unix_socket_dir =\n"
                "auth_type = trust\n"
                f"auth_file = {users}\n"
                "pool_mode = transaction\n"
                f"default_pool_size = {pool_size}\n"
                f"max_client_conn = {max_client_conn}\n"
                # no reserve pool: the pool's size is all PostgreSQL may see
                "reserve_pool_size = 0\n"
            )
            for path in (users, config):
                path.chmod(0o644)
            as_user = ["-u", _unprivileged_user()] if os.geteuid() == 0 else []
            with open(directory / f"stderr{attempt}.log", "wb") as log:
                proc = subprocess.Popen(
                    [binary, *as_user, str(config)], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                )
            bouncer = cls(directory, port, proc, pool_size)
            if bouncer._wait_listening(timeout=10):
                return bouncer
            bouncer.stop()
        raise RuntimeError(f"pgbouncer did not start:\n{bouncer.log()[-2000:]}")

    def url(self, database_url: str) -> str:
        """``database_url``'s database, user and parameters, through this PgBouncer."""
        through = make_url(database_url).set(host="127.0.0.1", port=self.port)
        return through.render_as_string(hide_password=False)

    def log(self) -> str:
        return "\n".join(path.read_text(errors="replace") for path in sorted(self.directory.glob("stderr*.log")))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # immediate shutdown before 1.23, safe after it
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _wait_listening(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self.proc.poll() is None  # not another program's port
            except OSError:
                time.sleep(0.05)
        return False


def _unprivileged_user() -> str:
    for name in ("nobody", "postgres"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("pgbouncer will not run as root, and there is no user `nobody` or `postgres` to run it as")
