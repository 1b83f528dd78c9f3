"""What every bench shares: its own database, results as JSON lines and a table, statistics, processes.

Each bench makes a database of its own next to the admin URL (``jobq_bench_<name>_<pid>``),
migrates it, and drops it when it ends, so benches never touch anybody's data and
two can run side by side. ``--keep`` leaves it for a look afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from service.store.migrate import upgrade

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"
ADMIN_URL_ENV = "JOBQ_BENCH_DATABASE_URL"
BENCH_APP = "bench.handlers"


# -- results ------------------------------------------------------------------------------


@dataclass
class Report:
    """Collects results: each is printed at once as one JSON line; ``table()`` prints them all again."""

    bench: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    quiet: bool = False

    def add(self, case: str, detail: dict[str, Any] | None = None, **values: Any) -> dict[str, Any]:
        """One result; ``detail`` goes into the JSON line only, not the table."""
        row = {"bench": self.bench, "case": case, **{k: _rounded(v) for k, v in values.items()}}
        self.rows.append(row)
        if not self.quiet:
            line = {**row, **{k: _rounded(v) for k, v in (detail or {}).items()}}
            print(json.dumps(line, default=str), flush=True)
        return row

    def table(self) -> str:
        if not self.rows:
            return "(no results)"
        columns: list[str] = []
        for row in self.rows:
            for key in row:
                if key not in columns and key != "bench":
                    columns.append(key)
        cells = [[_cell(row.get(c)) for c in columns] for row in self.rows]
        widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)),
            "  ".join("-" * w for w in widths),
        ]
        for row_cells in cells:
            lines.append(
                "  ".join(v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(row_cells, widths, strict=True))
            )
        return "\n".join(lines)

    def finish(self) -> None:
        print()
        print(f"== {self.bench} ==")
        print(self.table(), flush=True)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3) if abs(value) < 100 else round(value, 1)
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _numeric(text: str) -> bool:
    return bool(re.fullmatch(r"-?[\d,]+(\.\d+)?", text))


# -- statistics -----------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank on the sorted values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def load_average() -> float:
    """The 1-minute load average: how busy the (shared) machine was around a measurement."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


# -- databases ------------------------------------------------------------------------------


def admin_url(args: argparse.Namespace) -> str:
    return args.database_url or os.environ.get(ADMIN_URL_ENV) or DEFAULT_ADMIN_URL


def with_database(url: str, name: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(database=name).render_as_string(hide_password=False)


@contextlib.contextmanager
def bench_database(args: argparse.Namespace, name: str) -> Iterator[str]:
    """A fresh migrated database ``jobq_bench_<name>_<pid>`` for this run; dropped after unless --keep."""
    admin = admin_url(args)
    database = f"jobq_bench_{name}_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')  # names are ours, never input
        conn.execute(f'CREATE DATABASE "{database}"')
    url = with_database(admin, database)
    try:
        if getattr(args, "synchronous_commit", "on") == "off":
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'ALTER DATABASE "{database}" SET synchronous_commit = off')
        upgrade(url)
        yield url
    finally:
        if not getattr(args, "keep", False):
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


EMPTY_QUEUE_TABLES = (
    "TRUNCATE jobs, job_edges, job_attempts, job_results, job_replays, job_items, workers, scope_counters, limits"
)


def reset_jobs(url: str) -> None:
    """Empty every queue table (between repeats), and let the statistics catch up."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(EMPTY_QUEUE_TABLES)
        conn.execute("VACUUM ANALYZE jobs")


def scalar(url: str, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()  # type: ignore[arg-type]
        return row[0] if row else None


def database_counters(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Transactions committed in this database (each autocommit statement is one) and WAL position."""
    row = conn.execute(
        "SELECT xact_commit, xact_rollback, pg_current_wal_lsn() - '0/0'::pg_lsn"
        " FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    assert row is not None
    return {"xact_commit": int(row[0]), "xact_rollback": int(row[1]), "wal_lsn": int(row[2])}


SETTLE_SECONDS = 11.0
"""A backend that reported its statistics less than a second ago keeps new counts for up to
10 s of idleness (PGSTAT_IDLE_INTERVAL in PostgreSQL 15) before it reports them."""


def flush_stats(conn: psycopg.Connection[Any], settle: float = SETTLE_SECONDS) -> None:
    """Wait until every backend has reported what it did, so pg_stat_* counters are complete."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    time.sleep(settle)
    conn.execute("SELECT pg_stat_clear_snapshot()")


# -- processes --------------------------------------------------------------------------------


CODE = {"root": ROOT}
"""Where the worker and API processes load jobq from: this checkout, or another one
(``--code PATH``: an A/B of two versions under the same bench, interleaved)."""


def python_env(database_url: str, code: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBQ_")}
    env.update({"PYTHONPATH": str(code or CODE["root"]), "JOBQ_DATABASE_URL": database_url, **extra})
    return env


class WorkerProcess:
    """``python -m service worker --app bench.handlers ...`` in a process of its own."""

    def __init__(
        self,
        database_url: str,
        *args: str,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        app: str = BENCH_APP,
    ) -> None:
        command = [sys.executable, "-m", "service", "worker", "--app", app, *args]
        self.log_path = log_path
        out = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115 - closed in stop()
        self._out = out
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=python_env(database_url, **(env or {})),
            cwd=CODE["root"],
        )

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if hasattr(self._out, "close"):
            self._out.close()  # type: ignore[union-attr]
        return self.proc.returncode


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.05, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except psycopg.OperationalError:  # the server restarted under us (a shared server): look again
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def workers_registered(url: str, count: int) -> bool:
    return int(scalar(url, "SELECT count(*) FROM workers")) >= count


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ApiProcess:
    """``python -m service serve`` on a free local port, waited for until it answers.

    ``command`` replaces the server (the bare-uvicorn ceilings); ``code`` is the checkout it
    loads jobq from (default: ``--code``, else this one), so one bench can serve two versions."""

    def __init__(
        self,
        database_url: str,
        *,
        auth: bool = True,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        command: list[str] | None = None,
        code: Path | None = None,
    ) -> None:
        self.port = free_port()
        out = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115 - closed in stop()
        self._out = out
        extra = {"JOBQ_AUTH": "true" if auth else "false", **(env or {})}
        command = command or [sys.executable, "-m", "service", "serve"]
        self.proc = subprocess.Popen(
            [*command, "--port", str(self.port), "--log-level", "warning"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=python_env(database_url, code, **extra),
            cwd=code or CODE["root"],
        )
        wait_for(self._answers, 30, 0.1, "the API to answer")

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the API exited with {self.proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
                return sock.recv(64).startswith(b"HTTP/1.1 200")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if hasattr(self._out, "close"):
            self._out.close()  # type: ignore[union-attr]


def make_token(store: Any, tenant: str = "bench") -> str:
    from service.tokens import hash_token, new_token

    token = new_token()
    store.create_token(tenant, hash_token(token), name="bench")
    return token


# -- a PostgreSQL reference ------------------------------------------------------------------


def pgbench_tps(args: argparse.Namespace, clients: int, seconds: float) -> float:
    """pgbench's built-in TPC-B-like write transaction, on a scratch database: transactions/s."""
    admin = admin_url(args)
    from sqlalchemy.engine import make_url

    parsed = make_url(admin)
    database = f"jobq_bench_pgbench_{os.getpid()}"
    base = ["-h", parsed.host or "127.0.0.1", "-p", str(parsed.port or 5432), "-U", parsed.username or "postgres"]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{database}"')
    try:
        subprocess.run(["pgbench", *base, "-i", "-q", "-s", "1", database], check=True, capture_output=True)
        done = subprocess.run(
            ["pgbench", *base, "-c", str(clients), "-j", str(min(clients, 2)), "-T", str(int(seconds)), "-n", database],
            check=True,
            capture_output=True,
            text=True,
        )
        found = re.search(r"tps = ([\d.]+)", done.stdout)
        return float(found.group(1)) if found else float("nan")
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        default=None,
        help=f"admin URL; benches create their own databases next to it "
        f"(default ${ADMIN_URL_ENV} or {DEFAULT_ADMIN_URL})",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each case; the median is reported")
    parser.add_argument("--keep", action="store_true", help="keep the bench database afterwards")
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=SETTLE_SECONDS,
        help="wait for backends to report statistics before reading counters",
    )
    parser.add_argument(
        "--code", type=Path, default=None, help="run the worker and API processes from this checkout instead (A/B runs)"
    )
    parser.add_argument(
        "--synchronous-commit",
        choices=["on", "off"],
        default="on",
        help="off: the bench database's commits do not wait for the WAL flush (diagnostic: "
        "what the CPU allows when the disk is not the limit); never jobq's default",
    )


# -- CPU accounting ---------------------------------------------------------------------------
# On a shared machine wall-clock rates move with the neighbours' load; the CPU a process spent
# per job does not (much). Both are reported: rates for what was seen, CPU for what it costs.


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (and its finished children), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0.0
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class BackendCpu:
    """CPU that this database's backends spent between ``start()`` and ``stop()``.

    Read from /proc, so only for a server on this host; a short-lived connection that
    came and went in between is not counted (the benches' own monitoring ones)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._before: dict[int, float] = {}

    def _sample(self) -> dict[int, float]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
        return {int(r[0]): cpu_seconds(int(r[0])) for r in rows}

    def start(self) -> None:
        self._before = self._sample()

    def stop(self) -> float:
        after = self._sample()  # backends opened meanwhile count from zero; those closed meanwhile are lost
        return sum(spent - self._before.get(pid, 0.0) for pid, spent in after.items())
