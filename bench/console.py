"""console: how long the operator console's pages take to render as history grows.

    python -m bench console [--history 1000000] [--trials 30] [--auth session|off]

On one fresh PostgreSQL database: a working set (``--queued`` queued jobs, 20 of them
claimed and running), then the same terminal history as ``bench scale`` (succeeded,
one in fifty failed, over six weeks) added with one ``INSERT … SELECT`` and ANALYZE.
Before and after, each page is fetched ``--trials`` times, one request at a time, from
a real ``jobq serve`` over loopback HTTP, and the median and p95 wall time reported,
with the ratio to the same page on the working set alone. With ``--auth session`` (the
default, as a deployed console runs) the bench logs in with an admin token and every
request carries the session cookie, so each page pays its session lookup (the session
joined with its token); ``--auth off`` is JOBQ_AUTH=off, no lookup (the 2 Dec figures).
The history is folded into the daily rollup as the leader would (part of the setup time).
The pages: the overview, the job list and a job, failures, workers, limits, the stats at
each range, and the search by each filter that walks an index of its own (an error text,
an idempotency key, a concurrency key) or none (a kind with a time range). The target: the
overview and the first page of jobs under 300 ms with 1,000,000 jobs.
"""

from __future__ import annotations

import argparse
import re
import time

import httpx
import psycopg

from bench.common import ApiProcess, Report, bench_database, load_average, median, percentile
from bench.scale import HISTORY
from service.config import Settings
from service.jobs import NewJob
from service.maintenance.rollup import Rollup
from service.store import Store, open_store
from service.tokens import hash_token, new_token

PAGES = (
    "/ui",
    "/ui/jobs",
    "/ui/jobs/{job}",
    "/ui/failures",
    "/ui/workers",
    "/ui/limits",
    "/ui/stats?range=1h",
    "/ui/stats?range=24h&by=kind",
    "/ui/stats?range=7d",
    "/ui/jobs?error=boom",
    "/ui/jobs?idempotency_key=order-17",
    "/ui/jobs?concurrency_key=customer-9",
    "/ui/jobs?kind=noop&created_before=2000-01-01T00:00Z",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--history", type=int, default=1_000_000, help="terminal jobs in the table")
    parser.add_argument("--trials", type=int, default=30, help="renders of each page")
    parser.add_argument("--queued", type=int, default=1_000, help="queued jobs kept as the working set")
    parser.add_argument(
        "--auth",
        choices=("session", "off"),
        default="session",
        help="session: log in and send the session cookie (each page looks its session up); off: JOBQ_AUTH=off",
    )


def run(args: argparse.Namespace) -> Report:
    report = Report("console")
    with bench_database(args, "console") as url:
        store = open_store(Settings(database_url=url, notify=False))
        api = ApiProcess(url, auth=args.auth == "session")
        try:
            with (
                httpx.Client(base_url=f"http://127.0.0.1:{api.port}", timeout=60) as http,
                psycopg.connect(url, autocommit=True) as admin,
            ):
                if args.auth == "session":
                    _log_in(http, store)
                store.enqueue_many([NewJob(kind="noop") for _ in range(args.queued)])
                running = store.claim("bench-console", ["default"], 20, 600.0)
                admin.execute("ANALYZE")
                job = str(running[0].id)
                base = {page: _measure(http, page.format(job=job), args.trials) for page in PAGES}
                for page, (p50, p95) in base.items():
                    report.add(
                        f"{page} (working set only)",
                        history=0,
                        p50_ms=p50,
                        p95_ms=p95,
                        ratio=1.0,
                        auth=args.auth,
                        load=load_average(),
                    )
                began = time.perf_counter()
                admin.execute(HISTORY, {"first": 1, "last": args.history, "total": args.history})
                Rollup(store).run_until_done()  # what the leader folds: the 7 d stats read it
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
                        auth=args.auth,
                        load=load_average(),
                    )
        finally:
            api.stop()
            store.close()
    return report


def _log_in(http: httpx.Client, store: Store) -> None:
    """A session as an operator gets one: an admin token, the login form with its CSRF value."""
    token = new_token()
    store.create_token("", hash_token(token), "bench", admin=True)
    form = http.get("/ui/login").text
    found = re.search(r'name="csrf" value="([^"]+)"', form)
    assert found, "the login form has no CSRF field"
    answer = http.post("/ui/login", data={"csrf": found.group(1), "token": token, "next": "/ui"})
    assert answer.status_code == 303 and "jobq_session" in http.cookies, answer.text


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
