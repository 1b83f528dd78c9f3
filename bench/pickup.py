"""pickup: an idle worker, one enqueue, time until the handler starts; p50/p95/p99.

    python -m bench pickup [--trials 200] [--stores postgres,sqlite] [--sqlite-poll-seconds 0.05]

One ``jobq worker --app bench.handlers --concurrency 1`` process waits, idle.
Each trial takes ``time.monotonic()``, enqueues one ``pickup`` job through the
library, and waits for the handler to send its own ``time.monotonic()`` over a
local datagram socket (CLOCK_MONOTONIC is one clock for all processes of a
host). The latency therefore includes the enqueue's own round trip; it is also
reported from the enqueue's return (its commit) to the handler's start, the
queue's own share (``after_enqueue``). Trials are
spaced by a random 20–60 ms, so the worker is idle (not still finishing the
previous job) when the next one arrives.

On PostgreSQL the worker is woken by LISTEN/NOTIFY. SQLite has no
notifications: a worker finds new jobs by polling, so pickup there is about half
the poll interval; it is measured at the default ``--poll-seconds 2`` (with
fewer trials) and at ``--sqlite-poll-seconds``.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import tempfile
import time
from pathlib import Path

from bench.common import Report, WorkerProcess, bench_database, load_average, percentile, wait_for
from service.config import Settings
from service.jobs import NewJob
from service.store import open_store
from service.store.migrate import upgrade


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--stores", default="postgres,sqlite")
    parser.add_argument("--sqlite-poll-seconds", type=float, default=0.05)
    parser.add_argument(
        "--sqlite-default-trials",
        type=int,
        default=20,
        help="trials at the default 2 s poll interval on SQLite (each waits ~1 s)",
    )


def run(args: argparse.Namespace) -> Report:
    report = Report("pickup")
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    with tempfile.TemporaryDirectory(prefix="jobq-bench-pickup-") as tmp:
        for name in stores:
            if name == "postgres":
                with bench_database(args, "pickup") as url:
                    _case(report, url, Path(tmp), "postgres (LISTEN/NOTIFY)", args.trials, [])
            elif name == "sqlite":
                url = f"sqlite:///{Path(tmp) / 'pickup.db'}"
                upgrade(url)
                _case(
                    report,
                    url,
                    Path(tmp),
                    f"sqlite (poll {args.sqlite_poll_seconds:g} s)",
                    args.trials,
                    ["--poll-seconds", str(args.sqlite_poll_seconds)],
                )
                if args.sqlite_default_trials > 0:
                    _case(report, url, Path(tmp), "sqlite (poll 2 s, the default)", args.sqlite_default_trials, [])
            else:
                raise SystemExit(f"unknown store {name!r}: postgres or sqlite")
    return report


def _case(report: Report, url: str, tmp: Path, case: str, trials: int, options: list[str]) -> None:
    address = str(tmp / f"pickup-{os.getpid()}-{len(report.rows)}.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(address)
        sock.settimeout(30)
        worker = WorkerProcess(
            url,
            "--concurrency",
            "1",
            "--log-level",
            "warning",
            *options,
            log_path=tmp / f"worker-{len(report.rows)}.log",
        )
        store = open_store(Settings(database_url=url))
        latencies = []
        enqueue_times = []
        after_commit = []
        try:
            wait_for(lambda: _registered(store), 60, 0.1, "the worker to register")
            time.sleep(1.0)  # the listener connects
            for trial in range(trials):
                time.sleep(random.uniform(0.02, 0.06))
                job = NewJob(kind="pickup", payload={"socket": address, "trial": trial})
                sent = time.monotonic()
                store.enqueue(job)
                enqueued = time.monotonic()
                while True:
                    data = sock.recv(256).decode().split()
                    if int(data[0]) == trial:
                        break
                latencies.append(float(data[1]) - sent)
                enqueue_times.append(enqueued - sent)
                after_commit.append(float(data[1]) - enqueued)
        finally:
            store.close()
            worker.stop()
        ms = [x * 1000 for x in latencies]
        report.add(
            case,
            trials=trials,
            p50_ms=percentile(ms, 50),
            p95_ms=percentile(ms, 95),
            p99_ms=percentile(ms, 99),
            enqueue_p50_ms=percentile([x * 1000 for x in enqueue_times], 50),
            after_enqueue_p50_ms=percentile([x * 1000 for x in after_commit], 50),
            after_enqueue_p99_ms=percentile([x * 1000 for x in after_commit], 99),
            load=load_average(),
        )


def _registered(store: object) -> bool:
    return bool(store.list_workers())  # type: ignore[attr-defined]
