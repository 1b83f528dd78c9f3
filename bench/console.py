"""console: how long the operator console's pages take to render as history grows.

    python -m bench console [--history 1000000] [--trials 30]

On one fresh PostgreSQL database: a working set (``--queued`` queued jobs, 20 of them
claimed and running), then the same terminal history as ``bench scale`` (succeeded,
one in fifty failed, over six weeks) added with one ``INSERT … SELECT`` and ANALYZE.
Before and after, each page is fetched ``--trials`` times, one request at a time, from
a real ``jobq serve`` (JOBQ_AUTH=off: no token lookup) over loopback HTTP, and the
median and p95 wall time reported, with the ratio to the same page on the working
set alone. The target: the overview and the
first page of jobs under 300 ms with 1,000,000 jobs.
"""

from __future__ import annotations

import argparse
import time

import httpx
import psycopg

from bench.common import ApiProcess, Report, bench_database, load_average, median, percentile
from bench.scale import HISTORY
from service.config import Settings
from service.jobs import NewJob
from service.store import open_store

PAGES = ("/ui", "/ui/jobs", "/ui/jobs/{job}", "/ui/failures", "/ui/workers")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--history", type=int, default=1_000_000, help="terminal jobs in the table")
    parser.add_argument("--trials", type=int, default=30, help="renders of each page")
    parser.add_argument("--queued", type=int, default=1_000, help="queued jobs kept as the working set")


def run(args: argparse.Namespace) -> Report:
    report = Report("console")
    with bench_database(args, "console") as url:
        store = open_store(Settings(database_url=url, notify=False))
        api = ApiProcess(url, auth=False)
        try:
            with (
                httpx.Client(base_url=f"http://127.0.0.1:{api.port}", timeout=60) as http,
                psycopg.connect(url, autocommit=True) as admin,
            ):
                store.enqueue_many([NewJob(kind="noop") for _ in range(args.queued)])
                running = store.claim("bench-console", ["default"], 20, 600.0)
                admin.execute("ANALYZE")
                job = str(running[0].id)
                base = {page: _measure(http, page.format(job=job), args.trials) for page in PAGES}
                for page, (p50, p95) in base.items():
                    report.add(
                        f"{page} (working set only)", history=0, p50_ms=p50, p95_ms=p95, ratio=1.0, load=load_average()
                    )
                began = time.perf_counter()
                admin.execute(HISTORY, {"first": 1, "last": args.history, "total": args.history})
                admin.execute("ANALYZE")
                took = time.perf_counter() - began
                for page in PAGES:
                    p50, p95 = _measure(http, page.format(job=job), args.trials)
                    report.add(
                        f"{page} ({args.history:,} history)",
                        history=args.history,
                        p50_ms=p50,
                        p95_ms=p95,
                        ratio=p50 / base[page][0],
                        setup_s=took,
                        load=load_average(),
                    )
        finally:
            api.stop()
            store.close()
    return report


def _measure(http: httpx.Client, path: str, trials: int) -> tuple[float, float]:
    for _ in range(3):  # warm the pool's prepared statements and the template cache
        assert http.get(path).status_code == 200, path
    times = []
    for _ in range(trials):
        began = time.perf_counter()
        answer = http.get(path)
        times.append((time.perf_counter() - began) * 1000)
        assert answer.status_code == 200, path
    return median(times), percentile(times, 95)
