"""compare: jobq beside PgQueuer in the same run, interleaved, with pgbench before and after.

    python -m bench compare [--jobs 20000] [--rounds 3] [--cases 1x10,2x10,defaults,best] [--enqueue-jobs 20000]

Needs the ``bench`` extra (``pip install -e '.[bench]'``: PgQueuer, asyncpg). Both
queues live in one bench database (jobq's migrations, PgQueuer's ``install``) and
run no-op jobs. Each round runs every case once for each queue, one after the
other (jobq, then PgQueuer), so both meet the same machine; the table gives each
case's per-round ratio jobq / PgQueuer and their median.

Cases (P processes each; every process of a case is started and left to go idle
before the jobs are enqueued in one statement):

- ``PxC``: jobq at ``--concurrency C`` (its defaults otherwise, ``--log-level
  info`` to a file) against PgQueuer capped at C jobs in flight per process
  (``max_concurrent_tasks=C``, ``batch_size=C/2``, the largest batch PgQueuer
  allows under that cap);
- ``defaults``: one process of each at its defaults: jobq ``--concurrency 4``
  (prefetch 1 per slot), PgQueuer ``batch_size=10`` with no cap;
- ``best``: the best of jobq 1 x 100 and 2 x 100 against the best of PgQueuer
  1 and 2 processes at ``batch_size`` 10 and 100, no cap.

Rates: jobs over the span from the first claim to the last completion, both by
the database clock (jobq: ``job_attempts.started_at``/``jobs.finished_at``;
PgQueuer: its log table's ``picked`` and ``successful`` rows).

Batch enqueue: ``--enqueue-jobs`` jobs in one call, jobq ``store.enqueue_many`` (in a
process of its own, ``bench/enqueue_once.py``) against PgQueuer ``Queries.enqueue``
with lists, tables emptied between runs; besides the rate, the CPU per job of the
calling process and of the database's backends (/proc). ``--enqueue-reference PATH``
adds jobq from another checkout to every round: before and after a change, beside
PgQueuer, interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.common import (
    CODE,
    ROOT,
    BackendCpu,
    Report,
    WorkerProcess,
    bench_database,
    load_average,
    median,
    pgbench_tps,
    python_env,
    reset_jobs,
    scalar,
    wait_for,
    workers_registered,
)
from service.config import Settings
from service.jobs import NewJob
from service.store import open_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--cases", default="1x10,2x10,defaults,best")
    parser.add_argument("--enqueue-jobs", type=int, default=20_000, help="jobs in one batch enqueue (0: skip)")
    parser.add_argument(
        "--enqueue-reference",
        type=Path,
        default=None,
        metavar="PATH",
        help="also enqueue with jobq from this checkout, in each round before the others "
        "(an A/B of the batch enqueue beside PgQueuer)",
    )
    parser.add_argument("--pgbench-seconds", type=float, default=10.0, help="pgbench before and after (0: skip)")
    parser.add_argument("--log-level", default="info", help="jobq workers' --log-level")
    parser.add_argument("--timeout", type=float, default=300.0)


@dataclass(frozen=True)
class Setup:
    """One side of a case: P processes of one queue with its options."""

    queue: str  # "jobq" or "pgqueuer"
    processes: int
    options: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.processes} x {' '.join(self.options)}"


def _cases(spec: str) -> dict[str, tuple[list[Setup], list[Setup]]]:
    cases: dict[str, tuple[list[Setup], list[Setup]]] = {}
    for name in (c.strip() for c in spec.split(",") if c.strip()):
        if name == "defaults":
            cases[name] = ([Setup("jobq", 1, ("--concurrency", "4"))], [Setup("pgqueuer", 1, ("--batch-size", "10"))])
        elif name == "best":
            cases[name] = (
                [Setup("jobq", p, ("--concurrency", "100")) for p in (1, 2)],
                [Setup("pgqueuer", p, ("--batch-size", str(b))) for p in (1, 2) for b in (10, 100)],
            )
        else:
            processes, concurrency = (int(x) for x in name.split("x"))
            cases[name] = (
                [Setup("jobq", processes, ("--concurrency", str(concurrency)))],
                [
                    Setup(
                        "pgqueuer",
                        processes,
                        ("--batch-size", str(max(1, concurrency // 2)), "--max-concurrent-tasks", str(concurrency)),
                    )
                ],
            )
    return cases


def run(args: argparse.Namespace) -> Report:
    report = Report("compare")
    cases = _cases(args.cases)
    with bench_database(args, "compare") as url, tempfile.TemporaryDirectory(prefix="jobq-bench-") as logs:
        asyncio.run(_pgq_install(url))
        if args.pgbench_seconds > 0:
            _pgbench(report, args, "before")
        rates: dict[tuple[str, str], list[float]] = {}
        cpu: dict[str, list[Enqueued]] = {}
        for round_ in range(1, args.rounds + 1):
            for name, sides in cases.items():
                for setups in sides:
                    for setup in setups:
                        rate = _drain(args, url, setup, Path(logs) / f"{name}-{round_}-{setup.queue}")
                        rates.setdefault((name, setup.label), []).append(rate)
                        report.add(
                            f"round {round_}, {name}: {setup.queue} {setup.label}",
                            queue=setup.queue,
                            jobs_per_s=rate,
                            load=load_average(),
                        )
            if args.enqueue_jobs > 0:
                for side, code in _enqueue_sides(args):
                    enqueued = _enqueue(url, side, args.enqueue_jobs, code)
                    rates.setdefault(("enqueue", side), []).append(enqueued.rate)
                    cpu.setdefault(side, []).append(enqueued)
                    report.add(
                        f"round {round_}, batch enqueue of {args.enqueue_jobs}: {side}",
                        queue=side,
                        jobs_per_s=enqueued.rate,
                        **enqueued.cpu_us(),
                        load=load_average(),
                    )
        if args.pgbench_seconds > 0:
            _pgbench(report, args, "after")
        _summarise(report, cases, rates, cpu, args)
    return report


def _enqueue_sides(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """The batch enqueue's sides, in the order each round runs them, with jobq's checkouts."""
    sides = [("jobq", CODE["root"]), ("pgqueuer", ROOT)]
    if args.enqueue_reference is not None:
        sides.insert(0, ("reference", args.enqueue_reference.resolve()))
    return sides


def _summarise(
    report: Report,
    cases: dict[str, tuple[list[Setup], list[Setup]]],
    rates: dict[tuple[str, str], list[float]],
    cpu: dict[str, list[Enqueued]],
    args: argparse.Namespace,
) -> None:
    for name, (ours, theirs) in cases.items():
        # Per round: jobq's best setup of the case over PgQueuer's best (one setup each but in "best").
        per_round = []
        for i in range(args.rounds):
            mine = max(rates[(name, s.label)][i] for s in ours)
            other = max(rates[(name, s.label)][i] for s in theirs)
            per_round.append((mine, other))
        report.add(
            f"{name}: jobq / PgQueuer",
            jobq=median([m for m, _ in per_round]),
            pgqueuer=median([o for _, o in per_round]),
            ratio_per_round=[round(m / o, 2) for m, o in per_round],
            ratio=median([m / o for m, o in per_round]),
        )
    if args.enqueue_jobs > 0:
        ratios = [("jobq", "pgqueuer")]
        if args.enqueue_reference is not None:
            ratios += [("reference", "pgqueuer"), ("jobq", "reference")]
        for mine, other in ratios:
            pairs = list(zip(rates[("enqueue", mine)], rates[("enqueue", other)], strict=True))
            report.add(
                f"batch enqueue: {mine} / {other}",
                **{mine: median([m for m, _ in pairs]), other: median([o for _, o in pairs])},
                ratio_per_round=[round(m / o, 2) for m, o in pairs],
                ratio=median([m / o for m, o in pairs]),
            )
        for queue, runs in cpu.items():
            report.add(
                f"batch enqueue CPU per job: {queue}",
                queue=queue,
                client_cpu_us_per_job=median([r.cpu_us()["client_cpu_us_per_job"] for r in runs]),
                backend_cpu_us_per_job=median([r.cpu_us()["backend_cpu_us_per_job"] for r in runs]),
            )


def _pgbench(report: Report, args: argparse.Namespace, when: str) -> None:
    for clients in (1, 8):
        report.add(
            f"pgbench tpcb-like {when}, {clients} client(s)",
            clients=clients,
            tps=pgbench_tps(args, clients, args.pgbench_seconds),
            load=load_average(),
        )


# -- the two queues ------------------------------------------------------------------------------


async def _pgq_connect(url: str) -> Any:
    import asyncpg

    return await asyncpg.connect(url)


async def _pgq_install(url: str) -> None:
    from pgqueuer import AsyncpgDriver, Queries

    connection = await _pgq_connect(url)
    try:
        await Queries(AsyncpgDriver(connection)).install()
    finally:
        await connection.close()


async def _pgq_enqueue(url: str, jobs: int, backends: BackendCpu | None = None) -> Enqueued:
    from pgqueuer import AsyncpgDriver, Queries

    connection = await _pgq_connect(url)
    try:
        queries = Queries(AsyncpgDriver(connection))
        if backends is not None:
            backends.start()
        cpu, started = time.process_time(), time.perf_counter()
        ids = await queries.enqueue(["noop"] * jobs, [None] * jobs, [0] * jobs)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert len(ids) == jobs
        return Enqueued(jobs, elapsed, cpu, backends.stop() if backends is not None else 0.0)
    finally:
        await connection.close()


def _reset_pgqueuer(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")
        conn.execute("VACUUM ANALYZE pgqueuer")


@dataclass(frozen=True)
class Enqueued:
    """One batch enqueue: its time, and the CPU of the calling process and of the database's backends."""

    jobs: int
    seconds: float
    client_cpu: float
    backend_cpu: float

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds

    def cpu_us(self) -> dict[str, float]:
        return {
            "client_cpu_us_per_job": 1e6 * self.client_cpu / self.jobs,
            "backend_cpu_us_per_job": 1e6 * self.backend_cpu / self.jobs,
        }


def _enqueue(url: str, side: str, jobs: int, code: Path) -> Enqueued:
    """One batch of ``jobs`` in one call, on emptied tables, the connections made first:
    PgQueuer in this process, jobq in a process of its own on the checkout ``code``."""
    reset_jobs(url)
    _reset_pgqueuer(url)
    backends = BackendCpu(url)
    if side == "pgqueuer":
        return asyncio.run(_pgq_enqueue(url, jobs, backends))
    with subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "enqueue_once.py"), url, str(jobs)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**python_env(url), "PYTHONPATH": str(code)},
        cwd=code,
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"jobq's enqueue from {code} did not start")
        backends.start()
        child.stdin.write("go\n")
        child.stdin.flush()
        answer = json.loads(child.stdout.readline())
        spent = backends.stop()
        child.stdin.write("done\n")
        child.stdin.flush()
    if child.returncode != 0:
        raise RuntimeError(f"jobq's enqueue from {code} exited with {child.returncode}")
    return Enqueued(jobs, answer["seconds"], answer["cpu_seconds"], spent)


class _PgqProcess:
    def __init__(self, url: str, options: tuple[str, ...], log_path: Path) -> None:
        self._out = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.pgqueuer_worker", url, *options],
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=self._out,
            env={**python_env(url), "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
        )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._out.close()


def _pgq_connected(url: str, processes: int) -> bool:
    from bench.pgqueuer_worker import APPLICATION_NAME

    return (
        int(
            scalar(
                url,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
                [APPLICATION_NAME],
            )
        )
        >= processes
    )


def _drain(args: argparse.Namespace, url: str, setup: Setup, log_prefix: Path) -> float:
    reset_jobs(url)
    _reset_pgqueuer(url)
    if setup.queue == "jobq":
        options = [*setup.options, "--log-level", args.log_level, "--grace-seconds", "5"]
        workers: list[Any] = [
            WorkerProcess(url, *options, log_path=Path(f"{log_prefix}-{i}.log")) for i in range(setup.processes)
        ]
        ready = lambda: workers_registered(url, setup.processes)  # noqa: E731
    else:
        workers = [_PgqProcess(url, setup.options, Path(f"{log_prefix}-{i}.log")) for i in range(setup.processes)]
        ready = lambda: _pgq_connected(url, setup.processes)  # noqa: E731
    try:
        wait_for(ready, 60, 0.1, f"the {setup.queue} workers to start")
        time.sleep(2.0)  # listeners connected, first (empty) polls passed
        if setup.queue == "jobq":
            store = open_store(Settings(database_url=url))
            try:
                store.enqueue_many([NewJob(kind="noop") for _ in range(args.jobs)])
            finally:
                store.close()
            wait_for(
                lambda: not scalar(url, "SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN ('queued', 'running'))"),
                args.timeout,
                0.1,
                "jobq to drain",
            )
        else:
            asyncio.run(_pgq_enqueue(url, args.jobs))
            wait_for(
                lambda: int(scalar(url, "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")) >= args.jobs,
                args.timeout,
                0.1,
                "PgQueuer to drain",
            )
    finally:
        for worker in workers:
            worker.stop()
    if setup.queue == "jobq":
        succeeded = int(scalar(url, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"))
        span = float(
            scalar(
                url,
                "SELECT extract(epoch FROM (SELECT max(finished_at) FROM jobs)"
                " - (SELECT min(started_at) FROM job_attempts))",
            )
        )
    else:
        succeeded = int(scalar(url, "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"))
        span = float(
            scalar(
                url,
                "SELECT extract(epoch FROM max(created) FILTER (WHERE status = 'successful')"
                " - min(created) FILTER (WHERE status = 'picked')) FROM pgqueuer_log",
            )
        )
    if succeeded != args.jobs:
        raise RuntimeError(f"{setup.queue}: {succeeded} of {args.jobs} jobs succeeded (logs {log_prefix}-*)")
    return args.jobs / span
