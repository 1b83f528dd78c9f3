"""fleet: what a wide, mostly idle fleet of single-slot workers costs PostgreSQL.

    python -m bench fleet [--workers 10,50,100,200] [--pooler none,pgbouncer] [--notify on|off]
                          [--idle-seconds 30] [--jobs 5000] [--pickup-trials 20]

For each fleet size N (``jobq worker --concurrency 1`` processes, started and left
to settle first) and each way of reaching the server (directly, or through a
PgBouncer of the bench's own in transaction mode, ``bench/pgbouncer.py``):

- **idle**: the fleet's committed transactions and its backends' CPU over
  ``--idle-seconds`` with no job anywhere, per worker: transactions/s and µs of
  PostgreSQL CPU per second (and that as a share of one core);
- **pickup**: one job at a time into the idle fleet, from the enqueue to the
  handler's start (CLOCK_MONOTONIC, as ``bench pickup``), p50/p99;
- **drain**: ``--jobs`` no-op jobs enqueued in one statement, jobs/s from the first
  start to the last finish (the database clock), PostgreSQL CPU µs and commits per job;
- **connections**: the most server connections the database had during the run.

Direct cases that would need more connections than the server allows are
skipped with a note: that is the pooler's job. Behind a pooler the workers run
without LISTEN (``JOBQ_NOTIFY=false``: a transaction pooler cannot carry it).
Extrapolating: a fleet of M idle workers costs M x (transactions/s per worker)
and M x (µs/s per worker) of PostgreSQL, since every idle worker does the same
thing; the table gives both per worker, so 1,000 is a multiplication.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import tempfile
import threading
import time
from pathlib import Path

import psycopg

from bench.common import (
    BackendCpu,
    Report,
    WorkerProcess,
    bench_database,
    database_counters,
    load_average,
    percentile,
    reset_jobs,
    scalar,
    wait_for,
    with_database,
    workers_registered,
)
from bench.pgbouncer import available as pgbouncer_available
from bench.pgbouncer import pgbouncer
from service.config import Settings
from service.jobs import NewJob
from service.store import open_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", default="10,50,100,200", help="fleet sizes, comma-separated")
    parser.add_argument("--pooler", default="none,pgbouncer", help="none, pgbouncer, or both (comma-separated)")
    parser.add_argument("--pool-size", type=int, default=10, help="PgBouncer's default_pool_size")
    parser.add_argument("--notify", choices=["on", "off"], default="on", help="JOBQ_NOTIFY of direct workers")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=15.0,
        help="idle time before the idle window: start-up work and first polls pass",
    )
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--pickup-trials", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=600.0, help="give up on a drain after this many seconds")


def run(args: argparse.Namespace) -> Report:
    report = Report("fleet")
    sizes = [int(n) for n in args.workers.split(",") if n.strip()]
    poolers = [p.strip() for p in args.pooler.split(",") if p.strip()]
    with bench_database(args, "fleet") as url, tempfile.TemporaryDirectory(prefix="jobq-bench-fleet-") as tmp:
        limit = int(scalar(url, "SELECT current_setting('max_connections')::int")) - 10
        for pooler in poolers:
            if pooler == "pgbouncer" and not pgbouncer_available():
                report.add(f"{pooler}: skipped", note="pgbouncer is not installed")
                continue
            for size in sizes:
                case = f"{size} workers, {'PgBouncer' if pooler == 'pgbouncer' else 'direct'}"
                if pooler == "none" and size * 2 > limit:
                    report.add(case, workers=size, note=f"skipped: {size} x 2 connections > {limit}; use a pooler")
                    continue
                reset_jobs(url)
                if pooler == "pgbouncer":
                    with pgbouncer(url, pool_size=args.pool_size) as through:
                        _case(args, report, case, size, url, through, Path(tmp), notify=False)
                else:
                    _case(args, report, case, size, url, url, Path(tmp), notify=args.notify == "on")
    return report


class _Connections:
    """The most server connections to the database seen, sampled every 0.2 s in a thread.

    It samples from the server's ``postgres`` database: five reads a second from inside the
    fleet's database were five of its transactions a second, which the idle window counted as
    the fleet's (0.5 per worker of a fleet of 10, 3 Dec)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.database = url.rsplit("/", 1)[1].split("?", 1)[0]
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        with psycopg.connect(with_database(self.url, "postgres"), autocommit=True) as conn:
            while not self._stop.wait(0.2):
                count = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (self.database,)
                ).fetchone()
                self.most = max(self.most, int(count[0]) if count else 0)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.most


def _case(
    args: argparse.Namespace, report: Report, case: str, size: int, url: str, through: str, tmp: Path, *, notify: bool
) -> None:
    env = {"JOBQ_NOTIFY": "true" if notify else "false"}
    options = ["--concurrency", "1", "--log-level", "warning"]
    connections = _Connections(url)
    workers = [
        WorkerProcess(through, *options, env=env, log_path=tmp / f"{case}-{i}.log".replace(" ", "_"))
        for i in range(size)
    ]
    try:
        wait_for(lambda: workers_registered(url, size), 60 + size, 0.2, f"{size} workers to register")
        time.sleep(args.warmup_seconds)
        idle = _idle(url, args.idle_seconds)
        pickup = _pickup(url, tmp, args.pickup_trials)
        drain = _drain(url, args.jobs, args.timeout)
    finally:
        for worker in workers:
            worker.proc.terminate()
        for worker in workers:
            worker.stop()
        most = connections.stop()
    commits, cpu = idle
    report.add(
        case,
        workers=size,
        idle_xacts_per_s_per_worker=commits / args.idle_seconds / size,
        idle_pg_cpu_us_per_s_per_worker=cpu / args.idle_seconds / size * 1e6,
        idle_pg_core_pct_at_1000=cpu / args.idle_seconds / size * 1000 * 100,
        pickup_p50_ms=percentile(pickup, 50),
        pickup_p99_ms=percentile(pickup, 99),
        drain_jobs_per_s=drain[0],
        drain_pg_cpu_us_per_job=drain[1],
        drain_commits_per_job=drain[2],
        server_connections=most,
        load=load_average(),
    )


def _idle(url: str, seconds: float) -> tuple[int, float]:
    """Commits and backend CPU seconds over ``seconds`` with nothing to do.

    pg_stat_database lags each backend's own report (up to ~10 s for an idle one); in a
    steady idle state what is unreported at both ends is the same on average."""
    backends = BackendCpu(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        before = database_counters(conn)["xact_commit"]
        backends.start()
        time.sleep(seconds)
        cpu = backends.stop()
        conn.execute("SELECT pg_stat_clear_snapshot()")
        after = database_counters(conn)["xact_commit"]
    # Less this connection's first read and its snapshot clear, and BackendCpu's two samples.
    return after - before - 4, cpu


def _pickup(url: str, tmp: Path, trials: int) -> list[float]:
    """Milliseconds from an enqueue to its handler's start, one job at a time into the idle fleet."""
    address = str(tmp / f"pickup-{os.getpid()}.sock")
    store = open_store(Settings(database_url=url))
    latencies: list[float] = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(address)
            sock.settimeout(60)
            for trial in range(trials):
                time.sleep(random.uniform(0.2, 0.6))
                sent = time.monotonic()
                store.enqueue(NewJob(kind="pickup", payload={"socket": address, "trial": trial}))
                while True:
                    data = sock.recv(256).decode().split()
                    if int(data[0]) == trial:
                        break
                latencies.append((float(data[1]) - sent) * 1000)
    finally:
        store.close()
        os.unlink(address)
    return latencies


def _drain(url: str, jobs: int, timeout: float) -> tuple[float, float, float]:
    """(jobs/s, PostgreSQL CPU µs per job, commits per job) for ``jobs`` no-op jobs."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        commits_before = database_counters(conn)["xact_commit"]
    backends = BackendCpu(url)
    backends.start()
    store = open_store(Settings(database_url=url))
    try:
        store.enqueue_many([NewJob(kind="noop") for _ in range(jobs)])
    finally:
        store.close()
    wait_for(
        lambda: (
            not scalar(url, "SELECT EXISTS (SELECT 1 FROM jobs WHERE kind = 'noop' AND state IN ('queued', 'running'))")
        ),
        timeout,
        0.2,
        "the drain",
    )
    cpu = backends.stop()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        commits = database_counters(conn)["xact_commit"] - commits_before
    succeeded = int(scalar(url, "SELECT count(*) FROM jobs WHERE kind = 'noop' AND state = 'succeeded'"))
    if succeeded != jobs:
        raise RuntimeError(f"{succeeded} of {jobs} jobs succeeded")
    span = float(
        scalar(
            url,
            "SELECT extract(epoch FROM max(j.finished_at) - min(a.started_at)) FROM jobs j"
            " JOIN job_attempts a ON a.job_id = j.id WHERE j.kind = 'noop'",
        )
    )
    return jobs / span, cpu / jobs * 1e6, commits / jobs
