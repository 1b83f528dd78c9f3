"""poll: N clients polling ``GET /v1/jobs/{id}`` against one API process.

    python -m bench poll [--clients 1,8,32] [--seconds 10] [--jobs 1000] [--auth both]

One ``jobq serve`` process; each client is one keep-alive connection sending
its next request as soon as the last is answered, each time for a random one of
``--jobs`` queued jobs of the token's tenant. Reported: requests/s, p50 and p99
latency, and database queries per poll — transactions committed in the bench
database during the run (each autocommit statement is one) over the requests —
and the CPU per request of the API process and of PostgreSQL's backends (from
/proc: on a shared machine the rate moves with the neighbours, the CPU much less).

For a ceiling, the same client also loads ``bench.hello``, a bare ASGI app
that answers a constant JSON body, under the same uvicorn: what one Python HTTP
server process does on this machine at that moment with no work at all.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys

import psycopg

from bench.common import (
    ApiProcess,
    BackendCpu,
    Report,
    bench_database,
    cpu_seconds,
    database_counters,
    flush_stats,
    load_average,
    make_token,
    percentile,
)
from bench.httpload import request, run_load
from service.config import Settings
from service.jobs import NewJob
from service.store import open_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", default="1,8,32", help="comma-separated numbers of concurrent clients")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    parser.add_argument("--jobs", type=int, default=1_000, help="jobs the clients poll (random picks)")
    parser.add_argument(
        "--auth",
        choices=["on", "off", "both"],
        default="both",
        help="bearer tokens on (the default of jobq serve) or JOBQ_AUTH=off",
    )
    parser.add_argument("--no-ceiling", action="store_true", help="skip the bare-uvicorn ceiling")


def run(args: argparse.Namespace) -> Report:
    report = Report("poll")
    clients = [int(c) for c in args.clients.split(",") if c.strip()]
    with bench_database(args, "poll") as url:
        store = open_store(Settings(database_url=url))
        try:
            token = make_token(store, tenant="bench")
            jobs = store.enqueue_many([NewJob(kind="noop", tenant="bench") for _ in range(args.jobs)])
            store.enqueue_many([NewJob(kind="noop", tenant="default") for _ in range(args.jobs)])
        finally:
            store.close()
        modes = {"on": [True], "off": [False], "both": [True, False]}[args.auth]
        for auth in modes:
            ids = [str(j.id) for j in jobs]
            api = ApiProcess(url, auth=auth)
            try:
                if not auth:  # JOBQ_AUTH=off serves tenant "default": poll its jobs
                    with psycopg.connect(url) as conn:
                        ids = [str(r[0]) for r in conn.execute("SELECT id FROM jobs WHERE tenant = 'default'")]
                requests = [request("GET", f"/v1/jobs/{job_id}", token=token if auth else None) for job_id in ids]

                def pick(client: int, n: int, requests: list[bytes] = requests) -> bytes:
                    return random.choice(requests)

                asyncio.run(run_load(api.port, 4, min(1.0, args.seconds), pick))  # warm up
                for n in clients:
                    with psycopg.connect(url, autocommit=True) as conn:
                        flush_stats(conn, args.settle_seconds)
                        before = database_counters(conn)
                        backends = BackendCpu(url)
                        backends.start()
                        api_cpu = cpu_seconds(api.proc.pid)
                        result = asyncio.run(run_load(api.port, n, args.seconds, pick))
                        api_cpu = cpu_seconds(api.proc.pid) - api_cpu
                        postgres_cpu = backends.stop()
                        flush_stats(conn, args.settle_seconds)
                        after = database_counters(conn)
                    # this connection's own statements: the snapshot clears and the counter reads
                    queries = after["xact_commit"] - before["xact_commit"] - 3
                    ms = [x * 1000 for x in result.latencies]
                    done = max(1, result.requests)
                    report.add(
                        f"auth {'on' if auth else 'off'}, {n} client(s)",
                        clients=n,
                        requests_per_s=result.requests / result.seconds,
                        p50_ms=percentile(ms, 50),
                        p99_ms=percentile(ms, 99),
                        errors=result.errors,
                        queries_per_poll=queries / done,
                        api_cpu_us_per_poll=api_cpu / done * 1e6,
                        postgres_cpu_us_per_poll=postgres_cpu / done * 1e6,
                        api_cpu_share=api_cpu / result.seconds,
                        load=load_average(),
                    )
            finally:
                api.stop()
        if not args.no_ceiling:
            _ceiling(args, url, clients, report)
    return report


def _ceiling(args: argparse.Namespace, url: str, clients: list[int], report: Report) -> None:
    server = ApiProcess(url, command=[sys.executable, "-m", "uvicorn", "bench.hello:app"])
    try:
        plain = request("GET", "/v1/jobs/00000000-0000-0000-0000-000000000000")
        asyncio.run(run_load(server.port, 4, min(1.0, args.seconds), lambda c, n: plain))
        for n in clients:
            spent = cpu_seconds(server.proc.pid)
            result = asyncio.run(run_load(server.port, n, args.seconds, lambda c, i: plain))
            spent = cpu_seconds(server.proc.pid) - spent
            ms = [x * 1000 for x in result.latencies]
            done = max(1, result.requests)
            report.add(
                f"ceiling: bare uvicorn, {n} client(s)",
                clients=n,
                requests_per_s=result.requests / result.seconds,
                p50_ms=percentile(ms, 50),
                p99_ms=percentile(ms, 99),
                errors=result.errors,
                queries_per_poll=0.0,
                api_cpu_us_per_poll=spent / done * 1e6,
                api_cpu_share=spent / result.seconds,
                load=load_average(),
            )
    finally:
        server.stop()
