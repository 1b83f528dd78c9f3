"""A PgBouncer of the bench's own, in transaction mode, in front of one database.

Debian's ``pgbouncer`` package (1.18 on Debian 12): the version that has no
``max_prepared_statements``, so jobq must work through it without server-side
prepared statements. The bouncer listens on a free local port, trusts every
client (it runs on the loopback only), and is stopped when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import make_url

PGBOUNCER = "/usr/sbin/pgbouncer"


def available() -> bool:
    return Path(PGBOUNCER).exists() or shutil.which("pgbouncer") is not None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def pgbouncer(database_url: str, *, pool_size: int = 10, max_clients: int = 2000) -> Iterator[str]:
    """Yield a URL that reaches ``database_url`` through a fresh PgBouncer in transaction mode."""
    url = make_url(database_url)
    port = _free_port()
    user = url.username or "postgres"
    with tempfile.TemporaryDirectory(prefix="jobq-pgbouncer-") as tmp:
        folder = Path(tmp)
        (folder / "users.txt").write_text(f'"{user}" ""\n')
        (folder / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"{url.database} = host={url.host or '127.0.0.1'} port={url.port or 5432} dbname={url.database}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {folder / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\nmin_pool_size = 0\nreserve_pool_size = 0\n"
            f"max_client_conn = {max_clients}\n"
            "server_reset_query =\nignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {folder / 'pgbouncer.log'}\n"
        )
        command = [shutil.which("pgbouncer") or PGBOUNCER, str(folder / "pgbouncer.ini")]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            command[1:1] = ["-u", "postgres"]
            owner = pwd.getpwnam("postgres")
            os.chown(folder, owner.pw_uid, owner.pw_gid)
            for path in folder.iterdir():
                os.chown(path, owner.pw_uid, owner.pw_gid)
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 10
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"pgbouncer exited: {proc.stderr.read().decode() if proc.stderr else ''}")
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("pgbouncer did not listen within 10 s")
                time.sleep(0.05)
            yield url.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
