"""drain: no-op jobs drained by worker processes, jobs/s from the first claim to the last completion.

    python -m bench drain [--jobs 20000] [--cases 1x10,2x10,1x50,2x50] [--repeat 3] [--pgbench-seconds 10]

A case ``PxC`` is P ``jobq worker --app bench.handlers --concurrency C``
processes. They are started first and left to go idle; then all the jobs are
enqueued in one statement, so every worker is woken at the same moment and
process start-up is not measured. The rate is the job count over the span
between the first attempt's ``started_at`` and the last job's ``finished_at``
(both the database clock). Every run checks that all its jobs succeeded.

``--tenants N`` spreads the jobs over N tenants (round robin); with ``--limit L``
every tenant is limited to L running jobs (``tenant:* --concurrency L``) and each
case runs twice in the same run, unlimited first, so the limited rate is read
against its reference (``vs_unlimited``); ``--weighted`` gives every other tenant
weight 3.

``--pgbench-seconds`` also measures pgbench's TPC-B-like write transactions
with 1 and 8 clients in the same run: PostgreSQL's commit rate on this machine,
against which the queue's figures can be read.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psycopg

from bench.common import (
    BackendCpu,
    Report,
    WorkerProcess,
    bench_database,
    cpu_seconds,
    database_counters,
    load_average,
    median,
    pgbench_tps,
    reset_jobs,
    scalar,
    wait_for,
    workers_registered,
)
from service.config import Settings
from service.jobs import NewJob
from service.limits import Limit
from service.store import open_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument(
        "--cases", default="1x10,2x10,1x50,2x50", help="comma-separated PROCESSESxCONCURRENCY, e.g. 1x10,2x10"
    )
    parser.add_argument("--pool-size", type=int, default=None, help="JOBQ_POOL_SIZE of the workers (default 2)")
    parser.add_argument("--notify", choices=["on", "off"], default="on", help="JOBQ_NOTIFY of the workers")
    parser.add_argument("--log-level", default="info", help="the workers' --log-level (logs go to a file)")
    parser.add_argument(
        "--pgbench-seconds",
        type=float,
        default=10.0,
        help="seconds of pgbench with 1 and with 8 clients as a reference (0: skip)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="give up on a run after this many seconds")
    parser.add_argument("--tenants", type=int, default=1, help="spread the jobs over this many tenants")
    parser.add_argument("--limit", type=int, default=None, help="tenant:* concurrency (each case also runs unlimited)")
    parser.add_argument("--weighted", action="store_true", help="every other tenant has weight 3")


def run(args: argparse.Namespace) -> Report:
    report = Report("drain")
    cases = [tuple(int(x) for x in case.strip().split("x")) for case in args.cases.split(",") if case.strip()]
    with bench_database(args, "drain") as url, tempfile.TemporaryDirectory(prefix="jobq-bench-") as logs:
        for processes, concurrency in cases:
            reference = None
            for limit in [None, args.limit] if args.limit is not None else [None]:
                runs = [
                    _drain_once(
                        args,
                        url,
                        processes,
                        concurrency,
                        limit,
                        Path(logs) / f"{processes}x{concurrency}-{limit}-{attempt}",
                    )
                    for attempt in range(args.repeat)
                ]
                rates = [r[0] for r in runs]
                rate = median(rates)
                reference = reference or rate
                tenants = f", {args.tenants} tenants" if args.tenants > 1 else ""
                limited = f", each limited to {limit}" if limit is not None else ""
                weighted = ", weighted" if args.weighted else ""
                report.add(
                    f"{processes} process(es) x concurrency {concurrency}{tenants}{limited}{weighted}",
                    processes=processes,
                    concurrency=concurrency,
                    jobs=args.jobs,
                    tenants=args.tenants,
                    limit=limit,
                    jobs_per_s=rate,
                    vs_unlimited=rate / reference,
                    runs=[round(r) for r in rates],
                    worker_cpu_us_per_job=median([r[1] for r in runs]),
                    postgres_cpu_us_per_job=median([r[2] for r in runs]),
                    statements_per_job=median([r[3] for r in runs]),
                    all_succeeded=True,
                    load=load_average(),
                )
    if args.pgbench_seconds > 0:
        for clients in (1, 8):
            report.add(
                f"pgbench tpcb-like, {clients} client(s)",
                clients=clients,
                tps=pgbench_tps(args, clients, args.pgbench_seconds),
                load=load_average(),
            )
    return report


def _drain_once(
    args: argparse.Namespace, url: str, processes: int, concurrency: int, limit: int | None, log_prefix: Path
) -> tuple[float, float, float, float]:
    """(jobs/s, worker CPU µs per job, PostgreSQL backend CPU µs per job, statements per job).

    Statements are committed transactions (each autocommit statement is one) from
    pg_stat_database, read after the workers exited (a backend reports its counts when
    it ends); they include the bench's own polls for the end of the drain, ten a second."""
    reset_jobs(url)
    env = {"JOBQ_NOTIFY": "true" if args.notify == "on" else "false"}
    if args.pool_size:
        env["JOBQ_POOL_SIZE"] = str(args.pool_size)
    options = ["--concurrency", str(concurrency), "--log-level", args.log_level, "--grace-seconds", "5"]
    if args.notify == "off":
        options += ["--poll-seconds", "0.1"]
    workers = [WorkerProcess(url, *options, env=env, log_path=Path(f"{log_prefix}-{i}.log")) for i in range(processes)]
    try:
        wait_for(lambda: workers_registered(url, processes), 60, 0.1, "the workers to register")
        time.sleep(1.0)  # their listeners connect, their first (empty) claims pass
        with psycopg.connect(url, autocommit=True) as conn:
            commits_before = database_counters(conn)["xact_commit"]
        backends = BackendCpu(url)
        backends.start()
        worker_cpu = sum(cpu_seconds(w.proc.pid) for w in workers)
        store = open_store(Settings(database_url=url))
        try:
            if limit is not None:
                store.set_limit(Limit("tenant:*", concurrency=limit))
            if args.weighted:
                for tenant in range(0, args.tenants, 2):
                    store.set_limit(Limit(f"tenant:t{tenant}", weight=3))
            # one statement, one wake-up
            store.enqueue_many([NewJob(kind="noop", tenant=f"t{n % args.tenants}") for n in range(args.jobs)])
        finally:
            store.close()
        wait_for(
            lambda: not scalar(url, "SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN ('queued', 'running'))"),
            args.timeout,
            0.1,
            "the queue to drain",
        )
        worker_cpu = sum(cpu_seconds(w.proc.pid) for w in workers) - worker_cpu
        postgres_cpu = backends.stop()
    finally:
        codes = [w.stop() for w in workers]
    time.sleep(1.0)  # the workers' backends end and report their counts
    with psycopg.connect(url, autocommit=True) as conn:
        statements = database_counters(conn)["xact_commit"] - commits_before
    succeeded = int(scalar(url, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"))
    if succeeded != args.jobs:
        raise RuntimeError(
            f"{succeeded} of {args.jobs} jobs succeeded (worker exit codes {codes}; logs {log_prefix}-*)"
        )
    span = float(
        scalar(
            url,
            "SELECT extract(epoch FROM (SELECT max(finished_at) FROM jobs) - (SELECT min(started_at) FROM job_attempts))",
        )
    )
    per_job = 1e6 / args.jobs
    return args.jobs / span, worker_cpu * per_job, postgres_cpu * per_job, statements / args.jobs
