"""workflows: jobs that wait for parents, drained by worker processes, beside the same number without.

    python -m bench workflows [--jobs 10000] [--layers 20] [--width 500] [--fan 3] [--chain 1000]
                              [--processes 2] [--concurrency 10] [--repeat 3]

Five shapes of no-op jobs, each enqueued as one batch (``enqueue_many``) to idle
``jobq worker --app bench.handlers`` processes, and drained:

- ``baseline``: ``--jobs`` jobs without dependencies, the reference;
- ``fan-out``: one job, then ``--jobs`` - 1 children of it, released by its completion;
- ``fan-in``: ``--jobs`` - 1 jobs, then one child of all of them;
- ``layered``: ``--layers`` layers of ``--width`` jobs, each job after ``--fan`` jobs of the
  layer before (drawn with a fixed seed);
- ``chain``: ``--chain`` jobs, each the child of the one before.

For each: jobs/s from the first attempt's start to the last job's finish (the database's clock),
the CPU PostgreSQL's backends spent per job (from /proc: a server on this host), and both as a
ratio of the baseline's in the same run (``vs_baseline``, ``cpu_vs_baseline``). The chain also
gives the time of each link, from its parent's start to its own (the handler does nothing, so
this is the parent's completion and the child's pickup): ``link_p50_ms`` and ``link_p99_ms``.
Not from the parent's finish: a worker that completes a job claims in the next statement of the
same transaction, so the child of a job its own worker refilled with would read only the time
between two statements (each stamps its own start). Every run checks that all its jobs succeeded, each once, and none started
before a parent of it finished. ``--shapes`` picks some; the baseline always runs.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    BackendCpu,
    Report,
    WorkerProcess,
    bench_database,
    load_average,
    median,
    percentile,
    reset_jobs,
    scalar,
    wait_for,
    workers_registered,
)
from service.config import Settings
from service.jobs import NewJob
from service.store import open_store
from service.workflows import chain

SHAPES = ("baseline", "fan-out", "fan-in", "layered", "chain")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs of the baseline, the fan-out and the fan-in")
    parser.add_argument("--layers", type=int, default=20, help="layers of the layered shape")
    parser.add_argument("--width", type=int, default=500, help="jobs in each layer")
    parser.add_argument("--fan", type=int, default=3, help="parents of each job in the layer before")
    parser.add_argument("--chain", type=int, default=1_000, help="links of the chain")
    parser.add_argument("--processes", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=10, help="each worker's --concurrency")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated, of " + ", ".join(SHAPES))
    parser.add_argument("--timeout", type=float, default=600.0, help="give up on a run after this many seconds")


@dataclass(frozen=True)
class Drained:
    jobs_per_s: float
    postgres_cpu_us_per_job: float
    link_seconds: list[float]  # each child's start after its last parent's start


def run(args: argparse.Namespace) -> Report:
    report = Report("workflows")
    chosen = [shape.strip() for shape in args.shapes.split(",") if shape.strip()]
    unknown = sorted(set(chosen) - set(SHAPES))
    if unknown:
        raise SystemExit(f"unknown shape(s): {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    builders = _shapes(args)
    with bench_database(args, "workflows") as url, tempfile.TemporaryDirectory(prefix="jobq-bench-") as logs:
        baseline: Drained | None = None
        for shape in ["baseline", *(s for s in SHAPES if s in chosen and s != "baseline")]:
            jobs = builders[shape]()
            runs = [_drain_once(args, url, jobs, Path(logs) / f"{shape}-{attempt}") for attempt in range(args.repeat)]
            drained = Drained(
                jobs_per_s=median([r.jobs_per_s for r in runs]),
                postgres_cpu_us_per_job=median([r.postgres_cpu_us_per_job for r in runs]),
                link_seconds=[s for r in runs for s in r.link_seconds],
            )
            baseline = baseline or drained
            links = {}
            if shape == "chain":
                links = {
                    "link_p50_ms": percentile(drained.link_seconds, 50) * 1000,
                    "link_p99_ms": percentile(drained.link_seconds, 99) * 1000,
                }
            report.add(
                shape,
                jobs=len(jobs),
                edges=sum(len(job.depends_on) for job in jobs),
                jobs_per_s=drained.jobs_per_s,
                vs_baseline=drained.jobs_per_s / baseline.jobs_per_s,
                postgres_cpu_us_per_job=drained.postgres_cpu_us_per_job,
                cpu_vs_baseline=drained.postgres_cpu_us_per_job / max(baseline.postgres_cpu_us_per_job, 1e-9),
                **links,
                runs=[round(r.jobs_per_s) for r in runs],
                processes=args.processes,
                concurrency=args.concurrency,
                load=load_average(),
            )
    return report


def _shapes(args: argparse.Namespace) -> dict[str, Callable[[], list[NewJob]]]:
    """Each shape as the batch ``enqueue_many`` takes (parents by position in it)."""
    if args.jobs < 2 or args.layers < 1 or args.width < 1 or not 1 <= args.fan <= args.width or args.chain < 2:
        raise SystemExit("--jobs and --chain must be at least 2, --layers and --width at least 1, --fan 1 to --width")

    def layered() -> list[NewJob]:
        pick = random.Random(29)  # the same graph in every run
        jobs = [NewJob("noop") for _ in range(args.width)]
        for layer in range(1, args.layers):
            before = range((layer - 1) * args.width, layer * args.width)
            jobs += [NewJob("noop", depends_on=tuple(pick.sample(before, args.fan))) for _ in range(args.width)]
        return jobs

    return {
        "baseline": lambda: [NewJob("noop") for _ in range(args.jobs)],
        "fan-out": lambda: [NewJob("noop"), *(NewJob("noop", depends_on=(0,)) for _ in range(args.jobs - 1))],
        "fan-in": lambda: [
            *(NewJob("noop") for _ in range(args.jobs - 1)),
            NewJob("noop", depends_on=tuple(range(args.jobs - 1))),
        ],
        "layered": layered,
        "chain": lambda: list(chain(*(NewJob("noop") for _ in range(args.chain))).jobs),
    }


def _drain_once(args: argparse.Namespace, url: str, jobs: list[NewJob], log_prefix: Path) -> Drained:
    reset_jobs(url)
    options = ["--concurrency", str(args.concurrency), "--log-level", "warning", "--grace-seconds", "5"]
    workers = [WorkerProcess(url, *options, log_path=Path(f"{log_prefix}-{i}.log")) for i in range(args.processes)]
    try:
        wait_for(lambda: workers_registered(url, args.processes), 60, 0.1, "the workers to register")
        time.sleep(1.0)  # their listeners connect, their first (empty) claims pass
        backends = BackendCpu(url)
        backends.start()
        store = open_store(Settings(database_url=url))
        try:
            store.enqueue_many(jobs)  # one batch: the whole graph, all or none
        finally:
            store.close()
        wait_for(
            lambda: not scalar(url, "SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN ('queued', 'running'))"),
            args.timeout,
            0.1,
            "the jobs to drain",
        )
        postgres_cpu = backends.stop()
    finally:
        codes = [w.stop() for w in workers]
    _check(url, len(jobs), codes, log_prefix)
    span = float(
        scalar(
            url,
            "SELECT extract(epoch FROM (SELECT max(finished_at) FROM jobs) - (SELECT min(started_at) FROM job_attempts))",
        )
    )
    return Drained(len(jobs) / span, postgres_cpu * 1e6 / len(jobs), _link_seconds(url))


def _check(url: str, jobs: int, codes: list[int | None], log_prefix: Path) -> None:
    """Every job succeeded, once, and none started before a parent of it finished."""
    succeeded = int(scalar(url, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"))
    attempts = int(scalar(url, "SELECT count(*) FROM job_attempts"))
    early = int(
        scalar(
            url,
            "SELECT count(*) FROM job_edges AS e JOIN jobs AS p ON p.id = e.parent"
            " JOIN job_attempts AS a ON a.job_id = e.child WHERE a.started_at < p.finished_at",
        )
    )
    if succeeded != jobs or attempts != jobs or early:
        raise RuntimeError(
            f"{succeeded} of {jobs} jobs succeeded in {attempts} attempts, {early} started before a parent "
            f"finished (worker exit codes {codes}; logs {log_prefix}-*)"
        )


def _link_seconds(url: str) -> list[float]:
    """For each job with parents: its first start after its last parent's first start (a chain's links)."""
    rows = scalar(
        url,
        "WITH started AS (SELECT job_id, min(started_at) AS at FROM job_attempts GROUP BY job_id)"
        " SELECT coalesce(array_agg(extract(epoch FROM link)), '{}') FROM ("
        "  SELECT c.at - max(p.at) AS link FROM job_edges AS e"
        "  JOIN started AS p ON p.job_id = e.parent JOIN started AS c ON c.job_id = e.child"
        "  GROUP BY e.child, c.at) AS links",
    )
    return [float(value) for value in rows]
