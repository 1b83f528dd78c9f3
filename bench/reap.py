"""reap: what the expired-lease probe costs, and how soon a killed worker's job runs again.

    python -m bench reap [--running 0,100,1000] [--churn 20000] [--trials 200] [--crash-trials 2]

The probe: ``store.reap()`` when no lease has expired — what every worker runs
every reap interval — timed through the store (round trip included), with N
jobs running under live leases, then again after ``--churn`` jobs went through
the queue without a vacuum (each left a dead entry in ``ix_jobs_running``, the
index the probe reads; autovacuum is off on the bench machine's server).
PostgreSQL backend CPU per probe is read from /proc.

The crash: two idle ``jobq worker`` processes at their defaults (``--lease-seconds``
to change the lease, ``--leader-lease-seconds`` the maintenance leadership's); one claims a
``sleep`` job and is killed with SIGKILL; the time from the kill to the job's next attempt
starting on the other worker (both instants from the database clock). The killed worker, started
first, usually leads the fleet's maintenance: the other reaps only once it has the lead, so the
time is about the longer of the two leases.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from pathlib import Path

from bench.common import (
    BackendCpu,
    Report,
    WorkerProcess,
    bench_database,
    load_average,
    percentile,
    reset_jobs,
    scalar,
    wait_for,
    workers_registered,
)
from service.config import Settings
from service.jobs import Completion, NewJob
from service.retry import RetryPolicy
from service.store import open_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--running", default="0,100,1000", help="running jobs during the probe, comma-separated")
    parser.add_argument("--churn", type=int, default=20_000, help="jobs put through the queue before the last probe")
    parser.add_argument("--trials", type=int, default=200, help="probes per case")
    parser.add_argument("--crash-trials", type=int, default=2, help="kill -9 trials (each waits about a lease)")
    parser.add_argument("--lease-seconds", type=float, default=None, help="the workers' lease (default: theirs, 60)")
    parser.add_argument(
        "--leader-lease-seconds",
        type=float,
        default=None,
        help="the workers' maintenance leadership lease (default: theirs, 15)",
    )


def run(args: argparse.Namespace) -> Report:
    report = Report("reap")
    with bench_database(args, "reap") as url:
        counts = [int(x) for x in args.running.split(",") if x.strip()]
        for running in counts:
            reset_jobs(url)
            _probe(report, url, running, 0, args.trials)
        if args.churn > 0:
            reset_jobs(url)
            _churn(url, args.churn)
            _probe(report, url, counts[-1] if counts else 0, args.churn, args.trials)
        with tempfile.TemporaryDirectory(prefix="jobq-bench-reap-") as logs:
            for trial in range(args.crash_trials):
                reset_jobs(url)
                _crash(report, url, args, Path(logs), trial)
    return report


def _probe(report: Report, url: str, running: int, churned: int, trials: int) -> None:
    store = open_store(Settings(database_url=url))
    try:
        if running:
            store.enqueue_many([NewJob(kind="noop") for _ in range(running)])
            claimed = store.claim("bench-holder", ["default"], running, 3_600)
            assert len(claimed) == running
        delays = RetryPolicy().delays_by_attempt()
        for _ in range(10):
            store.reap(delays)  # prepared (psycopg prepares after 5 runs), as on a worker that has run a while
        backends = BackendCpu(url)
        backends.start()
        times = []
        for _ in range(trials):
            started = time.perf_counter()
            result = store.reap(delays)
            times.append((time.perf_counter() - started) * 1000)
            assert result.total == 0
        cpu = backends.stop()
    finally:
        store.close()
    dead = scalar(url, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs'")
    report.add(
        f"probe, {running} running, {churned} churned",
        running=running,
        churned=churned,
        trials=trials,
        p50_ms=percentile(times, 50),
        p99_ms=percentile(times, 99),
        postgres_cpu_us=cpu / trials * 1e6,
        jobs_dead_tuples=dead,
        load=load_average(),
    )


def _churn(url: str, jobs: int) -> None:
    """Jobs queued, claimed and completed through the store, 500 at a time: dead index entries, no vacuum."""
    store = open_store(Settings(database_url=url))
    try:
        for _ in range(0, jobs, 500):
            store.enqueue_many([NewJob(kind="noop") for _ in range(500)])
            claimed = store.claim("bench-churn", ["default"], 500, 60)
            store.complete_many([Completion(job.lease, {}) for job in claimed])
    finally:
        store.close()


def _crash(report: Report, url: str, args: argparse.Namespace, logs: Path, trial: int) -> None:
    options = ["--log-level", "warning"]
    if args.lease_seconds is not None:
        options += ["--lease-seconds", str(args.lease_seconds)]
    if args.leader_lease_seconds is not None:
        options += ["--leader-lease-seconds", str(args.leader_lease_seconds)]
    victim = WorkerProcess(url, *options, log_path=logs / f"victim-{trial}.log")
    survivor: WorkerProcess | None = None
    try:
        wait_for(lambda: workers_registered(url, 1), 60, 0.1, "the first worker to register")
        store = open_store(Settings(database_url=url))
        try:
            job = store.enqueue(NewJob(kind="sleep", payload={"seconds": 3600}))
        finally:
            store.close()
        wait_for(
            lambda: scalar(url, "SELECT state = 'running' FROM jobs WHERE id = %s", [job.id]),
            30,
            0.05,
            "the job to start",
        )
        survivor = WorkerProcess(url, *options, log_path=logs / f"survivor-{trial}.log")
        wait_for(lambda: workers_registered(url, 2), 60, 0.1, "the second worker to register")
        time.sleep(1.0)  # its start-up reap has run: it is idle
        os.kill(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait(10)
        killed_at = scalar(url, "SELECT now()")
        lease = args.lease_seconds if args.lease_seconds is not None else Settings(database_url=url).lease_seconds
        expires = scalar(url, "SELECT lease_expires_at FROM jobs WHERE id = %s", [job.id])
        again = wait_for(
            lambda: scalar(url, "SELECT started_at FROM job_attempts WHERE job_id = %s AND claim = 2", [job.id]),
            lease * 3 + 120,
            0.1,
            "the job to run again",
        )
    finally:
        victim.stop()
        if survivor is not None:
            survivor.stop()
    back = (again - killed_at).total_seconds()
    report.add(
        f"kill -9 mid-job, trial {trial + 1}",
        lease_s=lease,
        running_again_after_s=back,
        over_lease_s=back - lease,
        after_lease_expired_s=(again - expires).total_seconds(),
        load=load_average(),
    )
