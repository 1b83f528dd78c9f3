"""claim: what one fair claim costs at 1, 100 and 10,000 tenants with due jobs, over 1 M queued rows.

    python -m bench claim [--queued 1000000] [--tenants 1,100,10000] [--claims 200] [--limit 10]

For each tenant count the queue is filled with --queued due rows spread evenly over
that many tenants (one INSERT from generate_series, then VACUUM ANALYZE), and
--claims claims of --limit jobs each are timed as a worker makes them (Store.claim:
one round trip, prepared after the first few). Between two claims the taken jobs
are put back (untimed), so every claim sees the same queue. Each tenant count is
measured twice: without limits, and with ``tenant:* --concurrency 3`` (a locked
counter row per tenant the claim takes from). ``--explain`` prints the claim's
EXPLAIN (ANALYZE, BUFFERS) for each case.
"""

from __future__ import annotations

import argparse
import time

import psycopg

from bench.common import EMPTY_QUEUE_TABLES, Report, bench_database, load_average, median
from service.config import Settings
from service.limits import Limit
from service.store import open_store
from service.store.postgres.heads import NO_HINTS
from service.store.postgres.statements import CLAIM_JOBS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queued", type=int, default=1_000_000)
    parser.add_argument("--tenants", default="1,100,10000", help="comma-separated tenant counts")
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--limit", type=int, default=10, help="jobs per claim (a worker's free slots)")
    parser.add_argument("--explain", action="store_true", help="print each case's EXPLAIN (ANALYZE, BUFFERS)")


def run(args: argparse.Namespace) -> Report:
    report = Report("claim")
    with bench_database(args, "claim") as url:
        reference = None
        for tenants in (int(t) for t in args.tenants.split(",") if t.strip()):
            _fill(url, args.queued, tenants)
            for limited in (False, True):
                p50, p90 = _time_claims(args, url, limited)
                reference = reference or p50
                report.add(
                    f"{tenants} tenant(s), {'tenant:* concurrency 3' if limited else 'no limits'}",
                    tenants=tenants,
                    queued=args.queued,
                    limited=limited,
                    claim_p50_ms=p50 * 1e3,
                    claim_p90_ms=p90 * 1e3,
                    vs_first=p50 / reference,
                    load=load_average(),
                )
                if args.explain:
                    print(_explain(url, args.limit))
    return report


def _fill(url: str, queued: int, tenants: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(EMPTY_QUEUE_TABLES)
        conn.execute(
            """
            INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                              run_after, created_at, updated_at)
            SELECT gen_random_uuid(), 't' || (g %% %(tenants)s), 'default', 'noop', '{}'::jsonb, 'queued', 0, 0, 3,
                   now() - make_interval(secs => %(queued)s - g), now(), now()
            FROM generate_series(1, %(queued)s) AS g
            """,
            {"tenants": tenants, "queued": queued},
        )
        conn.execute("VACUUM ANALYZE jobs")


def _time_claims(args: argparse.Namespace, url: str, limited: bool) -> tuple[float, float]:
    store = open_store(Settings(database_url=url))
    try:
        if limited:
            store.set_limit(Limit("tenant:*", concurrency=3))
        times = []
        with psycopg.connect(url, autocommit=True) as conn:
            for _ in range(args.claims):
                began = time.perf_counter()
                claimed = store.claim("bench", ["default"], args.limit, 60.0)
                times.append(time.perf_counter() - began)
                assert claimed, "the claim took nothing"
                conn.execute(
                    "UPDATE jobs SET state = 'queued', attempts = 0, lease_owner = NULL,"
                    " lease_expires_at = NULL WHERE state = 'running'"
                )
                conn.execute("UPDATE scope_counters SET running = 0 WHERE running > 0")
            conn.execute("DELETE FROM job_attempts")
            conn.execute("TRUNCATE scope_counters, limits")
    finally:
        store.close()
    times.sort()
    return median(times), times[int(len(times) * 0.9)]


def _explain(url: str, limit: int) -> str:
    params = {
        "now": None,
        "notify": False,
        "worker": "explain",
        "queues": ["default"],
        "kinds": None,
        "limit": limit,
        "visit": limit + 1,
        "cursor": "",
        "lease_seconds": 60.0,
        **NO_HINTS,
    }
    with psycopg.connect(url, autocommit=True, options="-c jit=off") as conn:  # as the store connects
        with conn.transaction(force_rollback=True):
            rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + CLAIM_JOBS, params).fetchall()
    return "\n".join(row[0] for row in rows)
