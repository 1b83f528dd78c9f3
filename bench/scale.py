"""scale: claim and status-poll latency as history grows, and after churn, as ratios to the empty table.

    python -m bench scale [--history 1000000,5000000] [--churn 1000000] [--trials 500]

Steps, on one database:

1. empty: only the working set (``--queued`` queued jobs);
2. for each total in ``--history``: terminal jobs (succeeded, one in fifty
   failed, with time-ordered ids over the past six weeks) are added with one
   ``INSERT … SELECT generate_series`` until the table holds that many, then ANALYZE;
3. churn: ``--churn`` jobs go through the queue (enqueue in batches of 10,000,
   claim 500 at a time, complete_many) — the dead tuples a busy queue leaves;
   autovacuum runs as the server is set (measured right after, no manual VACUUM;
   the ``autovacuum`` column says whether it is on at all);
4. then one ``VACUUM jobs``: what autovacuum does where it runs, and measured again.

At each step: the latency of ``store.claim(limit=1)`` (each claimed job is
completed again outside the timing, and the queue is topped up, so every claim
sees the same working set) and of ``store.get`` on a random live job (what a
status poll runs), medians and p99 over ``--trials``; each as a ratio to step 1.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import psycopg

from bench.common import Report, bench_database, load_average, median, percentile
from service.config import Settings
from service.errors import StoreUnavailable
from service.jobs import Completion, NewJob
from service.store import open_store

HISTORY = """
INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts, claims,
                  done, error, error_group, lease_owner, run_after, created_at, started_at, finished_at,
                  updated_at)
SELECT (lpad(to_hex((extract(epoch FROM g.ts) * 1000)::bigint), 12, '0') || '7' || substr(g.h, 1, 3)
        || '8' || substr(g.h, 4, 15))::uuid,
       'tenant-' || (g.i %% 100), 'default', 'noop', '{}'::jsonb,
       CASE WHEN g.i %% 50 = 0 THEN 'failed' ELSE 'succeeded' END, 0, 1, 3, 1, 0,
       CASE WHEN g.i %% 50 = 0 THEN 'ValueError: boom' END,
       CASE WHEN g.i %% 50 = 0 THEN 'ValueError: boom' END,
       'history-worker', g.ts, g.ts, g.ts, g.ts + interval '1 second', g.ts + interval '1 second'
FROM (SELECT i, md5(i::text) AS h,
             now() - interval '42 days' + (i::float8 / %(total)s::float8) * interval '41 days' AS ts
      FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i) AS g
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--history", default="1000000,5000000", help="comma-separated history sizes (cumulative)")
    parser.add_argument("--churn", type=int, default=1_000_000, help="jobs put through the queue at the end (0: skip)")
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--queued", type=int, default=1_000, help="queued jobs kept as the working set")


def run(args: argparse.Namespace) -> Report:
    report = Report("scale")
    sizes = [int(s) for s in args.history.split(",") if s.strip()]
    with bench_database(args, "scale") as url:
        store = open_store(Settings(database_url=url, notify=False))
        admin = psycopg.connect(url, autocommit=True)
        try:
            store.enqueue_many([NewJob(kind="noop") for _ in range(args.queued)])
            admin.execute("ANALYZE")
            base = _measure(store, admin, args)
            _add(report, "empty (working set only)", 0, base, base, admin)
            present = 0
            for total in sizes:
                if total > present:
                    began = time.perf_counter()
                    admin.execute(HISTORY, {"first": present + 1, "last": total, "total": max(sizes)})
                    admin.execute("ANALYZE jobs")
                    took = time.perf_counter() - began
                    present = total
                    _add(report, f"history {total:,}", total, _measure(store, admin, args), base, admin, took)
            if args.churn > 0:
                began = time.perf_counter()
                _churn(store, args.churn)
                store.enqueue_many([NewJob(kind="noop") for _ in range(args.queued)])  # the working set again
                took = time.perf_counter() - began
                _add(report, f"after {args.churn:,} churned", present, _measure(store, admin, args), base, admin, took)
                # What autovacuum does on its own where it runs (the migration sets jobs to be
                # vacuumed after 1 % churn); a server with autovacuum = off never does it.
                began = time.perf_counter()
                admin.execute("VACUUM jobs")
                took = time.perf_counter() - began
                _add(
                    report,
                    f"after {args.churn:,} churned, then VACUUM jobs",
                    present,
                    _measure(store, admin, args),
                    base,
                    admin,
                    took,
                )
        finally:
            admin.close()
            store.close()
    return report


def _add(
    report: Report,
    case: str,
    history: int,
    figures: dict[str, float],
    base: dict[str, float],
    admin: psycopg.Connection[Any],
    took: float | None = None,
) -> None:
    row = admin.execute(
        "SELECT n_live_tup, n_dead_tup, pg_total_relation_size('jobs'), pg_relation_size('ix_jobs_claimable'),"
        " autovacuum_count FROM pg_stat_user_tables WHERE relname = 'jobs'"
    ).fetchone()
    assert row is not None
    report.add(
        case,
        history=history,
        claim_p50_ms=figures["claim_p50"],
        claim_p99_ms=figures["claim_p99"],
        claim_ratio=figures["claim_p50"] / base["claim_p50"],
        status_p50_ms=figures["get_p50"],
        status_p99_ms=figures["get_p99"],
        status_ratio=figures["get_p50"] / base["get_p50"],
        dead_tuples=int(row[1]),
        jobs_mb=round(row[2] / 2**20),
        claimable_index_kb=round(row[3] / 2**10),
        autovacuums=int(row[4]),
        autovacuum=admin.execute("SHOW autovacuum").fetchone()[0],  # type: ignore[index]
        setup_s=took,
        load=load_average(),
    )


def _measure(store: Any, admin: psycopg.Connection[Any], args: argparse.Namespace) -> dict[str, float]:
    claims: list[float] = []
    gets: list[float] = []
    live = [r[0] for r in admin.execute("SELECT id FROM jobs WHERE state = 'queued' LIMIT 5000")]
    for _ in range(20):  # warm the connections' prepared statements and the caches
        store.get(random.choice(live))
        claimed = store.claim("bench-scale", ["default"], 1, 60.0)
        store.complete_many([Completion(job.lease, {}) for job in claimed])
        store.enqueue_many([NewJob(kind="noop") for _ in claimed])
    for trial in range(args.trials):
        began = time.perf_counter()
        claimed = store.claim("bench-scale", ["default"], 1, 60.0)
        claims.append(time.perf_counter() - began)
        store.complete_many([Completion(job.lease, {}) for job in claimed])
        store.enqueue_many([NewJob(kind="noop") for _ in claimed])
        job_id = random.choice(live)
        began = time.perf_counter()
        store.get(job_id)
        gets.append(time.perf_counter() - began)
        if trial % 100 == 99:
            live = [r[0] for r in admin.execute("SELECT id FROM jobs WHERE state = 'queued' LIMIT 5000")]
    ms = 1000.0
    return {
        "claim_p50": median(claims) * ms,
        "claim_p99": percentile(claims, 99) * ms,
        "get_p50": median(gets) * ms,
        "get_p99": percentile(gets, 99) * ms,
    }


def _churn(store: Any, total: int) -> None:
    left = total
    while left > 0:
        batch = min(10_000, left)
        _patiently(lambda batch=batch: store.enqueue_many([NewJob(kind="noop") for _ in range(batch)]))
        left -= batch
        while True:
            claimed = _patiently(lambda: store.claim("bench-churn", ["default"], 500, 60.0))
            if not claimed:
                break
            _patiently(lambda: store.complete_many([Completion(job.lease, {}) for job in claimed]))  # noqa: B023
            if len(claimed) < 500:
                break


def _patiently(step: Any) -> Any:
    """The churn takes minutes on a shared server that a neighbour's tests may restart: wait it out."""
    for _ in range(60):
        try:
            return step()
        except StoreUnavailable:
            time.sleep(2)
    return step()
