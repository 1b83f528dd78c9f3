"""history: six weeks of history at full scale: the analysts' queries, the claim beside it, a day's prune.

    python -m bench history --jobs 4200000 [--days 42] [--trials 500] [--pgbench-seconds 10] [--plans DIR]

Steps, on a database of its own and an empty one for reference (dropped at the end unless ``--keep``):

1. pgbench (1 and 8 clients, ``--pgbench-seconds``), the reference for every figure after it;
2. ``--jobs`` jobs of ``--days`` days of synthetic history (tests/analysts/synthetic.py:
   the analysts' test's own filler, written as a restore would), then the daily rollup
   folded over it (the maintenance step's ``run_until_done``; ``jobq migrate`` does the
   same on an existing database);
3. the claim with the history beside the working set (``--queued`` queued jobs of queue
   ``bench``) and on a second database holding the working set alone, interleaved in
   five rounds: p50 and p99 of ``store.claim(limit=1)`` over ``--trials`` each, and their
   ratios (each claimed job is completed and another enqueued outside the timing, so
   every claim sees the same queue);
4. every ```sql query of docs/ANALYSTS.md, best of ``--runs`` (with ``--plans DIR``, each
   query's ``EXPLAIN (ANALYZE, BUFFERS)`` is written to DIR/qNN.txt);
5. a day's prune: ``jobq prune --older-than <days - 1>d`` (the real command, a process of its
   own) while this process claims as in step 3: the prune's wall time, the jobs it deleted,
   and the claim's p50 and p99 during it beside ``--trials`` claims just before. ``--prunes``
   names the prunes' settings (``BATCH:PAUSE``, comma-separated), each pruning the next day
   (``<days - 2>d``, …), repeated ``--prune-rounds`` times in turn, so settings are compared
   on the same history and the same machine;
6. the claim beside a fleet's retention: ``--retention-workers`` real ``jobq worker
   --retention <day>d`` processes (each deleting RETENTION_BATCH expired jobs every
   ~RETENTION_EVERY s, the next day's history to chew on), timed for
   ``--retention-seconds`` once they have settled, beside ``--trials`` claims just before
   they started and just after they stopped, with the jobs they deleted meanwhile;
7. pgbench again.

Every row carries the 1-minute load average: on a shared machine, read each figure
beside it and beside pgbench. ``--history-url URL`` skips step 2 and measures an
existing database that already holds history (left in place afterwards).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.common import (
    Report,
    WorkerProcess,
    bench_database,
    load_average,
    median,
    percentile,
    pgbench_tps,
    python_env,
    wait_for,
    workers_registered,
)
from service.config import Settings
from service.jobs import Completion, NewJob
from service.maintenance.rollup import Rollup
from service.store import open_store
from service.worker.runtime import RETENTION_EVERY
from tests.analysts.synthetic import fill
from tests.analysts.test_queries import DocumentedQuery, documented_queries

DOCUMENT = Path(__file__).resolve().parents[1] / "docs" / "ANALYSTS.md"
QUEUE = "bench"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=4_200_000, help="jobs of history (100,000 a day for six weeks)")
    parser.add_argument("--days", type=float, default=42.0, help="days the history spans, ending now")
    parser.add_argument("--queued", type=int, default=1_000, help="queued jobs kept as the working set")
    parser.add_argument("--trials", type=int, default=500, help="claims per claim measurement")
    parser.add_argument("--runs", type=int, default=3, help="runs of each documented query; the best is reported")
    parser.add_argument("--pgbench-seconds", type=float, default=10.0, help="per pgbench run (0: skip)")
    parser.add_argument("--plans", type=Path, default=None, help="write EXPLAIN (ANALYZE, BUFFERS) of each query here")
    parser.add_argument("--no-prune", action="store_true", help="skip the day's prune")
    parser.add_argument(
        "--prunes",
        type=_prune_settings,
        default=[(1_000, 0.0)],
        metavar="BATCH:PAUSE,…",
        help="each prune's jobq prune --batch and --pause, one day each, in turn",
    )
    parser.add_argument("--prune-rounds", type=int, default=1, help="how many times --prunes runs")
    parser.add_argument(
        "--retention-workers",
        type=int,
        default=4,
        help="workers with --retention beside the claims in step 6 (0: skip it)",
    )
    parser.add_argument("--retention-seconds", type=float, default=60.0, help="claims timed beside them")
    parser.add_argument("--history-url", default=None, help="measure this database, which holds history already")


def run(args: argparse.Namespace) -> Report:
    report = Report("history")
    _pgbench(report, args, "before")
    if args.history_url:
        _measure_history(report, args, args.history_url)
    else:
        with bench_database(args, "history") as url:
            with psycopg.connect(url, autocommit=True) as conn:
                [(end,)] = conn.execute("SELECT now()").fetchall()
            began = time.perf_counter()
            stages = fill(url, jobs=args.jobs, days=args.days, end=end)
            report.add(
                f"fill {args.jobs:,} jobs over {args.days:g} days",
                detail={"stages": stages},
                seconds=time.perf_counter() - began,
                load=load_average(),
            )
            store = open_store(Settings(database_url=url, notify=False))
            try:
                began = time.perf_counter()
                folded = Rollup(store).run_until_done()
                report.add(
                    "rollup folded over the history",
                    seconds=time.perf_counter() - began,
                    jobs=folded,
                    load=load_average(),
                )
            finally:
                store.close()
            _measure_history(report, args, url)
    _pgbench(report, args, "after")
    return report


def _measure_history(report: Report, args: argparse.Namespace, url: str) -> None:
    store = open_store(Settings(database_url=url, notify=False))
    try:
        _working_set(store, args.queued)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE jobs")
            [(jobs,)] = conn.execute("SELECT count(*) FROM jobs").fetchall()
        _claims_beside_an_empty_table(report, args, store, jobs)
        _queries(report, args, url)
        day = round(args.days) - 1
        if not args.no_prune:
            for _ in range(args.prune_rounds):
                for batch, pause in args.prunes:
                    _prune(report, args, url, store, day=max(1, day), batch=batch, pause=pause)
                    day -= 1
        if args.retention_workers > 0:
            _retention(report, args, url, store, day=max(1, day))
    finally:
        store.close()


# -- the claim -----------------------------------------------------------------------------


def _working_set(store: Any, queued: int) -> None:
    store.enqueue_many([NewJob(kind="noop", queue=QUEUE) for _ in range(queued)])


def _claims(store: Any, trials: int, until: threading.Event | None = None) -> list[float]:
    """Claim latencies: ``trials`` of them, or as many as fit until ``until`` is set."""
    latencies: list[float] = []
    for _ in range(20):  # warm the connections' prepared statements and the caches
        _cycle(store)
    while (len(latencies) < trials) if until is None else not until.is_set():
        latencies.append(_cycle(store))
    return latencies


def _claims_beside_an_empty_table(report: Report, args: argparse.Namespace, store: Any, jobs: int) -> None:
    """The claim with the history and on a database holding the working set alone, interleaved
    in five rounds (A, B, A, B…), so both see the same machine: a ratio that load does not bend."""
    with bench_database(args, "history_empty") as empty_url:
        empty = open_store(Settings(database_url=empty_url, notify=False))
        try:
            _working_set(empty, args.queued)
            with psycopg.connect(empty_url, autocommit=True) as conn:
                conn.execute("ANALYZE jobs")
            with_history: list[float] = []
            without: list[float] = []
            for _ in range(5):
                without += _claims(empty, max(1, args.trials // 5))
                with_history += _claims(store, max(1, args.trials // 5))
        finally:
            empty.close()
    report.add("claim, working set only (interleaved)", **_latency(without), load=load_average())
    report.add(
        "claim, with history (interleaved)",
        **_latency(with_history),
        jobs=jobs,
        p50_ratio=median(with_history) / median(without),
        p99_ratio=percentile(with_history, 99) / percentile(without, 99),
        load=load_average(),
    )


def _cycle(store: Any) -> float:
    began = time.perf_counter()
    claimed = store.claim("bench-history", [QUEUE], 1, 60.0)
    took = time.perf_counter() - began
    store.complete_many([Completion(job.lease, {}) for job in claimed])
    store.enqueue_many([NewJob(kind="noop", queue=QUEUE) for _ in claimed])
    return took


def _latency(latencies: list[float]) -> dict[str, float]:
    return {"claims": len(latencies), "p50_ms": median(latencies) * 1000, "p99_ms": percentile(latencies, 99) * 1000}


# -- the analysts' queries -------------------------------------------------------------------


def _queries(report: Report, args: argparse.Namespace, url: str) -> None:
    if args.plans:
        args.plans.mkdir(parents=True, exist_ok=True)
    with psycopg.connect(url, autocommit=True) as conn:
        for query in documented_queries(DOCUMENT.read_text()):
            runs = []
            rows = 0
            for _ in range(args.runs):
                began = time.perf_counter()
                rows = len(conn.execute(query.sql).fetchall())  # type: ignore[arg-type]  # the document's own SQL
                runs.append(time.perf_counter() - began)
            report.add(
                f"q{query.number:02d} {_short(query)}",
                best_ms=min(runs) * 1000,
                rows=rows,
                detail={"runs_ms": [round(r * 1000, 1) for r in runs]},
                load=load_average(),
            )
            if args.plans:
                plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {query.sql}").fetchall()  # type: ignore[arg-type]
                text = "\n".join(line for (line,) in plan)
                (args.plans / f"q{query.number:02d}.txt").write_text(f"-- {query.title}\n{query.sql}\n\n{text}\n")


def _short(query: DocumentedQuery) -> str:
    return query.title[:48]


# -- retention -------------------------------------------------------------------------------


def _prune_settings(text: str) -> list[tuple[int, float]]:
    """``1000:0,200:0.02`` → [(1000, 0.0), (200, 0.02)]: each prune's batch and pause."""
    settings = []
    for part in text.split(","):
        batch, _, pause = part.partition(":")
        settings.append((int(batch), float(pause or 0.0)))
    return settings


def _prune(
    report: Report, args: argparse.Namespace, url: str, store: Any, *, day: int, batch: int, pause: float
) -> None:
    older_than = f"{day}d"
    prunable = store.count_prunable(day * 86_400)
    # The prune as an operator runs it, in its own process; the claims meanwhile, here.
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def prune() -> None:
        began = time.perf_counter()
        try:
            outcome["process"] = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "service",
                    "prune",
                    "--older-than",
                    older_than,
                    "--pause",
                    str(pause),
                    "--batch",
                    str(batch),
                ],
                env=python_env(url),
                capture_output=True,
                text=True,
                check=False,
            )
        finally:
            outcome["seconds"] = time.perf_counter() - began
            done.set()

    before = _claims(store, args.trials)
    thread = threading.Thread(target=prune, name="bench-prune")
    thread.start()
    during = _claims(store, 0, until=done)
    thread.join()
    process = outcome["process"]
    if process.returncode != 0:
        raise RuntimeError(f"jobq prune failed: {process.stderr.strip()}")
    report.add("claim, just before the prune", **_latency(before), load=load_average())
    report.add(f"claim, during jobq prune --older-than {older_than}", **_latency(during), load=load_average())
    report.add(
        f"jobq prune --older-than {older_than} --pause {pause:g} --batch {batch}",
        seconds=outcome["seconds"],
        prunable=prunable,
        p99_ratio=percentile(during, 99) / percentile(before, 99),
        detail={"stdout": process.stdout.strip()},
        load=load_average(),
    )


def _retention(report: Report, args: argparse.Namespace, url: str, store: Any, *, day: int) -> None:
    """Workers with ``--retention`` beside the claims: what retention costs the queue when it
    runs as the workers run it. Timed only once every worker has started and taken its turns,
    so their start-up (imports, registration) is not charged to it."""
    before = _claims(store, args.trials)
    prunable = store.count_prunable(day * 86_400)
    workers = [
        WorkerProcess(url, "--queues", "retention", "--retention", f"{day}d") for _ in range(args.retention_workers)
    ]
    try:
        wait_for(lambda: workers_registered(url, args.retention_workers), 60, what="the retention workers")
        time.sleep(3 * RETENTION_EVERY)
        left = store.count_prunable(day * 86_400)
        until = threading.Event()
        timer = threading.Timer(args.retention_seconds, until.set)
        timer.start()
        during = _claims(store, 0, until=until)
        deleted = left - store.count_prunable(day * 86_400)
    finally:
        for worker in workers:
            worker.stop()
    after = _claims(store, args.trials)
    report.add("claim, just before the retention workers", **_latency(before), load=load_average())
    report.add(
        f"claim, beside {args.retention_workers} workers with --retention {day}d",
        **_latency(during),
        p99_ratio=percentile(during, 99) / percentile(before, 99),
        p99_ratio_after=percentile(during, 99) / percentile(after, 99),
        deleted=deleted,
        jobs_per_second=deleted / args.retention_seconds,
        prunable_at_start=prunable,
        load=load_average(),
    )
    report.add("claim, just after they stopped", **_latency(after), load=load_average())


def _pgbench(report: Report, args: argparse.Namespace, when: str) -> None:
    if args.pgbench_seconds <= 0 or not shutil.which("pgbench"):
        return
    for clients in (1, 8):
        report.add(
            f"pgbench {when}, {clients} client(s)",
            tps=pgbench_tps(args, clients, args.pgbench_seconds),
            load=load_average(),
        )
