"""enqueue: jobs/s, one by one and in batches, through the library and over HTTP.

    python -m bench enqueue [--jobs 20000] [--batch 1000] [--repeat 3] [--no-http]

Library: ``store.enqueue(job)`` in a loop, and ``store.enqueue_many`` with
``--batch`` jobs at a time. HTTP: ``POST /v1/jobs`` one request per job on one
keep-alive connection, and ``POST /v1/jobs/batch`` with ``--batch`` jobs each,
against one ``jobq serve`` process. The tables are emptied between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from bench.common import ApiProcess, Report, bench_database, load_average, make_token, median, reset_jobs
from bench.httpload import Connection, request
from service.config import Settings
from service.jobs import NewJob
from service.store import open_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--no-http", action="store_true", help="library only")
    parser.add_argument(
        "--notify",
        choices=["on", "off", "both"],
        default="on",
        help="JOBQ_NOTIFY for the library runs (the wake-up NOTIFY of each enqueue)",
    )


def _jobs(n: int) -> list[NewJob]:
    return [NewJob(kind="noop", payload={"n": i}) for i in range(n)]


def run(args: argparse.Namespace) -> Report:
    report = Report("enqueue")
    with bench_database(args, "enqueue") as url:
        notify_modes = {"on": [True], "off": [False], "both": [True, False]}[args.notify]
        for notify in notify_modes:
            store = open_store(Settings(database_url=url, notify=notify))
            try:
                for mode in ("one_by_one", "batch"):
                    rates = []
                    for _ in range(args.repeat):
                        reset_jobs(url)
                        jobs = _jobs(args.jobs)
                        began = time.perf_counter()
                        if mode == "one_by_one":
                            for job in jobs:
                                store.enqueue(job)
                        else:
                            for start in range(0, len(jobs), args.batch):
                                store.enqueue_many(jobs[start : start + args.batch])
                        rates.append(len(jobs) / (time.perf_counter() - began))
                    report.add(
                        f"library {mode}",
                        notify=notify,
                        jobs=args.jobs,
                        batch=1 if mode == "one_by_one" else args.batch,
                        jobs_per_s=median(rates),
                        runs=[round(r) for r in rates],
                        load=load_average(),
                    )
            finally:
                store.close()
        if not args.no_http:
            _http(args, url, report)
    return report


def _http(args: argparse.Namespace, url: str, report: Report) -> None:
    store = open_store(Settings(database_url=url))
    token = make_token(store)
    store.close()
    api = ApiProcess(url)
    try:
        for mode in ("one_by_one", "batch"):
            rates = []
            for _ in range(args.repeat):
                reset_jobs_keep_tokens(url)
                rates.append(asyncio.run(_http_run(api.port, token, mode, args.jobs, args.batch)))
            report.add(
                f"http {mode}",
                notify=True,
                jobs=args.jobs,
                batch=1 if mode == "one_by_one" else args.batch,
                jobs_per_s=median(rates),
                runs=[round(r) for r in rates],
                load=load_average(),
            )
    finally:
        api.stop()


def reset_jobs_keep_tokens(url: str) -> None:
    reset_jobs(url)  # api_tokens is not among the emptied tables


async def _http_run(port: int, token: str, mode: str, n: int, batch: int) -> float:
    conn = await Connection.open(port)
    try:
        began = time.perf_counter()
        if mode == "one_by_one":
            for i in range(n):
                answer = await conn.send(
                    request(
                        "POST", "/v1/jobs", token=token, body=json.dumps({"kind": "noop", "payload": {"n": i}}).encode()
                    )
                )
                if answer.status != 202:
                    raise RuntimeError(f"POST /v1/jobs answered {answer.status}: {answer.body[:300]!r}")
        else:
            for start in range(0, n, batch):
                body = {"jobs": [{"kind": "noop", "payload": {"n": i}} for i in range(start, min(n, start + batch))]}
                answer = await conn.send(request("POST", "/v1/jobs/batch", token=token, body=json.dumps(body).encode()))
                if answer.status != 202:
                    raise RuntimeError(f"POST /v1/jobs/batch answered {answer.status}: {answer.body[:300]!r}")
        return n / (time.perf_counter() - began)
    finally:
        await conn.close()
