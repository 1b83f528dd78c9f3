"""submit: N clients sending ``POST /v1/jobs`` to one API process, beside a bare uvicorn + psycopg insert.

    python -m bench submit [--clients 1,32] [--seconds 4] [--rounds 2] [--reference PATH] [--keys]

One ``jobq serve`` process (auth on); each client is one keep-alive connection
submitting its next job as soon as the last is answered (``{"kind": "noop",
"payload": {"n": …}}``, a bearer token, with ``--keys`` a fresh Idempotency-Key
each). Reported per case: submits/s, p50 and p99 latency, and the CPU per submit
of the API process and of PostgreSQL's backends (from /proc: on a shared machine
the rate moves with the neighbours, the CPU much less). The jobs table is emptied
before each case.

The ceiling, measured in the same run: ``bench.bare_submit``, a bare ASGI app
under the same uvicorn that does a submit's database work and nothing else (one
token-checked INSERT with its NOTIFY, on an async psycopg pool of the API's
size). ``--reference PATH`` serves jobq from another checkout as well (the code
before a change): each round runs the reference, this checkout and the ceiling
one after the other, so an A/B sees the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
from pathlib import Path

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
    reset_jobs,
)
from bench.httpload import request, run_load
from service.config import Settings
from service.store import open_store

CEILING = [sys.executable, "-m", "uvicorn", "bench.bare_submit:app"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", default="1,32", help="comma-separated numbers of concurrent clients")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each case")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (reference, this, ceiling)")
    parser.add_argument(
        "--reference",
        type=Path,
        default=None,
        help="also serve jobq from this checkout (the code before a change), interleaved",
    )
    parser.add_argument("--keys", action="store_true", help="every submit carries a fresh Idempotency-Key")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the bare uvicorn + psycopg ceiling")


def run(args: argparse.Namespace) -> Report:
    report = Report("submit")
    clients = [int(c) for c in args.clients.split(",") if c.strip()]
    servers: list[tuple[str, dict[str, object]]] = []
    if args.reference is not None:
        servers.append(("reference", {"code": args.reference.resolve()}))
    servers.append(("jobq", {}))
    if not args.no_ceiling:
        servers.append(("ceiling: bare uvicorn + psycopg", {"command": CEILING, "code": Path(__file__).parents[1]}))
    with bench_database(args, "submit") as url:
        store = open_store(Settings(database_url=url))
        try:
            token = make_token(store, tenant="bench")
        finally:
            store.close()
        serial = itertools.count()

        def submit(client: int, n: int) -> bytes:
            number = next(serial)
            body = json.dumps({"kind": "noop", "payload": {"n": number}}).encode()
            headers = {"Idempotency-Key": f"bench-{number}"} if args.keys else None
            return request("POST", "/v1/jobs", token=token, body=body, headers=headers)

        for round_ in range(1, args.rounds + 1):
            for name, options in servers:
                server = ApiProcess(url, **options)  # type: ignore[arg-type]
                try:
                    asyncio.run(run_load(server.port, 4, min(1.0, args.seconds), submit))  # warm up
                    for n in clients:
                        _case(args, url, report, server, f"{name}, {n} client(s)", round_, n, submit)
                finally:
                    server.stop()
    return report


def _case(
    args: argparse.Namespace,
    url: str,
    report: Report,
    server: ApiProcess,
    case: str,
    round_: int,
    clients: int,
    submit: object,
) -> None:
    reset_jobs(url)
    counting = args.settle_seconds > 0  # statements per submit need the backends' statistics flushed
    with psycopg.connect(url, autocommit=True) as conn:
        if counting:
            flush_stats(conn, args.settle_seconds)
            before = database_counters(conn)
        backends = BackendCpu(url)
        backends.start()
        api_cpu = cpu_seconds(server.proc.pid)
        result = asyncio.run(run_load(server.port, clients, args.seconds, submit))  # type: ignore[arg-type]
        api_cpu = cpu_seconds(server.proc.pid) - api_cpu
        postgres_cpu = backends.stop()
        if counting:
            flush_stats(conn, args.settle_seconds)
            after = database_counters(conn)
    done = max(1, result.requests)
    # this connection's own statements (the snapshot clears and the counter read) are not the API's
    statements = (after["xact_commit"] - before["xact_commit"] - 3) / done if counting else None
    ms = [x * 1000 for x in result.latencies]
    report.add(
        case,
        round=round_,
        clients=clients,
        submits_per_s=result.requests / result.seconds,
        p50_ms=percentile(ms, 50),
        p99_ms=percentile(ms, 99),
        errors=result.errors,
        api_cpu_us_per_submit=api_cpu / done * 1e6,
        postgres_cpu_us_per_submit=postgres_cpu / done * 1e6,
        statements_per_submit=statements,
        load=load_average(),
        detail={"statuses": result.statuses},
    )
