"""cost: statements, row writes and WAL bytes per job lifecycle; connections per worker process.

    python -m bench cost [--jobs 10000] [--concurrency 1,10,50] [--enqueue batch|single]

Per lifecycle (enqueue, claim, run a no-op, complete), with one worker process
at each concurrency: the jobs are enqueued (in batches of 1,000, or one by one)
while the worker idles, and drained. Counted over that window, in the bench
database only:

- statements: ``pg_stat_database.xact_commit`` (every statement of jobq's hot
  path runs in autocommit, so one committed transaction is one statement and
  one round trip), less the bench's own monitoring statements;
- row writes: ``pg_stat_user_tables`` inserts, updates and HOT updates per table;
- WAL bytes: with ``pg_walinspect`` (PostgreSQL 15+), the records that touch this
  database's relations plus the commit records of their transactions; other
  databases on a shared server write WAL too, so ``pg_current_wal_lsn()``'s
  cluster-wide delta is reported beside it as an upper bound.

pg_stat_statements would name each statement, but needs a server restart to
preload, which a bench must not require.

Items: one job of ``--items`` items (1,000) run by a worker, first with one outcome per item
(``ctx.map``), then the same loop with progress only (``ctx.items``): statements, heartbeats
(updates of the job's row between its claim and its completion), job_items rows and WAL per
item. The outcomes ride on the heartbeats and the completion, so the items job should take
no more statements than the reference.

Heartbeats: 200 running jobs (fewer with a smaller ``--jobs``) renewed ten times each
with progress, through the store: row writes, the share of HOT updates, WAL per heartbeat.

Connections: the most ``pg_stat_activity`` rows with the worker's
``application_name`` seen (sampled every 10 ms) while it drains 0.2 s sleeps at
concurrency 1, 10 and 50.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.common import (
    Report,
    WorkerProcess,
    bench_database,
    flush_stats,
    load_average,
    reset_jobs,
    wait_for,
    workers_registered,
)
from service.config import Settings
from service.jobs import NewJob
from service.store import open_store

TABLES = ("jobs", "job_attempts", "job_results", "job_items")
HEARTBEAT_JOBS = 200
HEARTBEAT_ROUNDS = 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per lifecycle measurement")
    parser.add_argument("--concurrency", default="1,10,50")
    parser.add_argument("--enqueue", choices=["batch", "single", "both"], default="both")
    parser.add_argument("--notify", choices=["on", "off"], default="on")
    parser.add_argument("--connection-jobs", type=int, default=150, help="sleep jobs for the connection count")
    parser.add_argument("--items", type=int, default=1_000, help="items of the one job the items measurement runs")
    parser.add_argument("--item-seconds", type=float, default=0.002, help="each item's work, so heartbeats happen")


def run(args: argparse.Namespace) -> Report:
    report = Report("cost")
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    modes = ["batch", "single"] if args.enqueue == "both" else [args.enqueue]
    with bench_database(args, "cost") as url, tempfile.TemporaryDirectory(prefix="jobq-bench-cost-") as tmp:
        with psycopg.connect(url, autocommit=True) as conn:
            walinspect = _try_walinspect(conn)
        for mode in modes:
            for concurrency in levels:
                _lifecycle(report, args, url, Path(tmp), concurrency, mode, walinspect)
        for kind in ("items", "steps"):
            _items(report, args, url, Path(tmp), kind, walinspect)
        _heartbeats(report, args, url, walinspect)
        for concurrency in levels:
            _connections(report, args, url, Path(tmp), concurrency)
    return report


def _try_walinspect(conn: psycopg.Connection[Any]) -> bool:
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        return True
    except psycopg.Error:
        return False


def _table_counters(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, int, int]]:
    rows = conn.execute(
        "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = ANY(%s)",
        [list(TABLES)],
    ).fetchall()
    return {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in rows}


def _snapshot(conn: psycopg.Connection[Any], settle: float) -> dict[str, Any]:
    flush_stats(conn, settle)
    row = conn.execute(
        "SELECT xact_commit, pg_current_wal_lsn() FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    assert row is not None
    return {"commits": int(row[0]), "lsn": str(row[1]), "tables": _table_counters(conn)}


def _wait_drained(monitor: psycopg.Connection[Any]) -> int:
    """Until no job is queued or running; returns how many looks that took (the monitor's own statements)."""
    polls = 0
    while True:
        polls += 1
        row = monitor.execute("SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN ('queued', 'running'))").fetchone()
        if row is not None and not row[0]:
            return polls
        time.sleep(0.2)


def _lifecycle(
    report: Report, args: argparse.Namespace, url: str, tmp: Path, concurrency: int, mode: str, walinspect: bool
) -> None:
    reset_jobs(url)
    env = {"JOBQ_NOTIFY": "true" if args.notify == "on" else "false"}
    worker = WorkerProcess(
        url,
        "--concurrency",
        str(concurrency),
        "--log-level",
        "warning",
        env=env,
        log_path=tmp / f"cost-{mode}-{concurrency}.log",
    )
    store = open_store(Settings(database_url=url, notify=args.notify == "on"))
    monitor = _monitor(url, walinspect)
    try:
        wait_for(lambda: workers_registered(url, 1), 60, 0.1, "the worker to register")
        time.sleep(1.5)  # start-up statements (register, first reap, LISTEN) fall before the window
        before = _snapshot(monitor, args.settle_seconds)
        jobs = [NewJob(kind="noop") for _ in range(args.jobs)]
        if mode == "batch":
            for start in range(0, len(jobs), 1_000):
                store.enqueue_many(jobs[start : start + 1_000])
        else:
            for job in jobs:
                store.enqueue(job)
        polls = _wait_drained(monitor)
        time.sleep(0.2)
        own_wal, cluster_wal = _wal_since(monitor, before["lsn"], walinspect)
        after = _snapshot(monitor, args.settle_seconds)
    finally:
        monitor.close()
        store.close()
        worker.stop()
    # the monitor's own statements: four per snapshot (two clears, two reads), one per look at the queue,
    # and the four WAL reads
    own = 2 * 4 + polls + 4
    statements = after["commits"] - before["commits"] - own
    n = args.jobs
    writes: dict[str, float] = {}
    for table in TABLES:
        b = before["tables"].get(table, (0, 0, 0))
        a = after["tables"].get(table, (0, 0, 0))
        writes[f"{table}_inserts"] = (a[0] - b[0]) / n
        writes[f"{table}_updates"] = (a[1] - b[1]) / n
        writes[f"{table}_hot_updates"] = (a[2] - b[2]) / n
    report.add(
        f"lifecycle, enqueue {mode}, concurrency {concurrency}",
        detail=writes,
        jobs=n,
        concurrency=concurrency,
        statements_per_job=statements / n,
        row_writes_per_job=sum(v for k, v in writes.items() if not k.endswith("_hot_updates")),
        wal_bytes_per_job=(own_wal / n) if own_wal is not None else None,
        cluster_wal_bytes_per_job=cluster_wal / n,
        load=load_average(),
    )


def _items(report: Report, args: argparse.Namespace, url: str, tmp: Path, kind: str, walinspect: bool) -> None:
    """One job of many items: what per-item outcomes add to its statements, rows and WAL."""
    reset_jobs(url)
    worker = WorkerProcess(
        url,
        "--concurrency",
        "1",
        "--log-level",
        "warning",
        env={"JOBQ_NOTIFY": "false"},
        log_path=tmp / f"cost-{kind}.log",
    )
    store = open_store(Settings(database_url=url, notify=False))
    monitor = _monitor(url, walinspect)
    try:
        wait_for(lambda: workers_registered(url, 1), 60, 0.1, "the worker to register")
        time.sleep(1.5)  # start-up statements fall before the window
        before = _snapshot(monitor, args.settle_seconds)
        store.enqueue(NewJob(kind=kind, payload={"count": args.items, "delay": args.item_seconds}))
        polls = _wait_drained(monitor)
        own_wal, cluster_wal = _wal_since(monitor, before["lsn"], walinspect)
        after = _snapshot(monitor, args.settle_seconds)
        outcomes = monitor.execute("SELECT count(*) FROM job_items").fetchone()
    finally:
        monitor.close()
        store.close()
        worker.stop()
    own = 2 * 4 + polls + 4 + 1  # as in _lifecycle, and the count of job_items
    statements = after["commits"] - before["commits"] - own
    updates = after["tables"]["jobs"][1] - before["tables"]["jobs"][1]
    hot = after["tables"]["jobs"][2] - before["tables"]["jobs"][2]
    inserted = after["tables"].get("job_items", (0, 0, 0))[0] - before["tables"].get("job_items", (0, 0, 0))[0]
    report.add(
        f"one job of {args.items} items, {'an outcome per item' if kind == 'items' else 'progress only'}",
        items=args.items,
        statements=statements,
        # the job's row is updated by its claim, each heartbeat and its completion
        heartbeats=updates - 2,
        jobs_hot_share=hot / updates if updates else None,  # the claim is not HOT (indexed state), nor the completion
        job_items_rows=int(outcomes[0]) if outcomes else None,
        job_items_inserts=inserted,
        statements_per_item=statements / args.items,
        wal_bytes_per_item=(own_wal / args.items) if own_wal is not None else None,
        cluster_wal_bytes_per_item=cluster_wal / args.items,
        load=load_average(),
    )


def _heartbeats(report: Report, args: argparse.Namespace, url: str, walinspect: bool) -> None:
    """Lease renewals carrying progress, through the store as a worker's lease keeper sends them.
    They write no indexed column, so each should be a HOT update: no new index entries."""
    reset_jobs(url)
    store = open_store(Settings(database_url=url, notify=False))
    monitor = _monitor(url, walinspect)
    try:
        store.enqueue_many([NewJob(kind="noop") for _ in range(min(args.jobs, HEARTBEAT_JOBS))])
        jobs = store.claim("bench-cost", ["default"], HEARTBEAT_JOBS, 3600.0)
        before = _snapshot(monitor, args.settle_seconds)
        for done in range(HEARTBEAT_ROUNDS):
            for job in jobs:
                store.heartbeat(job.lease, 3600.0, done=done)
        own_wal, cluster_wal = _wal_since(monitor, before["lsn"], walinspect)
        after = _snapshot(monitor, args.settle_seconds)
    finally:
        monitor.close()
        store.close()
    beats = len(jobs) * HEARTBEAT_ROUNDS
    updates = after["tables"]["jobs"][1] - before["tables"]["jobs"][1]
    hot = after["tables"]["jobs"][2] - before["tables"]["jobs"][2]
    report.add(
        "heartbeats with progress",
        heartbeats=beats,
        row_writes_per_heartbeat=updates / beats,
        hot_share=hot / updates if updates else None,
        wal_bytes_per_heartbeat=(own_wal / beats) if own_wal is not None else None,
        cluster_wal_bytes_per_heartbeat=cluster_wal / beats,
        load=load_average(),
    )


def _monitor(url: str, walinspect: bool) -> psycopg.Connection[Any]:
    monitor = psycopg.connect(url, autocommit=True)
    if walinspect:
        # A temporary slot keeps the window's WAL from being recycled (other databases' checkpoints
        # would remove it before it is read); it goes away with this connection.
        monitor.execute(
            "SELECT pg_create_physical_replication_slot(%s, true, true)", [f"jobq_bench_cost_{os.getpid()}"]
        )
    return monitor


def _wal_since(monitor: psycopg.Connection[Any], start: str, walinspect: bool) -> tuple[float | None, float]:
    """WAL written since ``start``: this database's own (None without pg_walinspect), and the cluster's."""
    # pg_walinspect reads only what is flushed: end the window at the flush position.
    row = monitor.execute("SELECT pg_current_wal_flush_lsn()").fetchone()
    assert row is not None
    end = str(row[0])
    row = monitor.execute("SELECT pg_wal_lsn_diff(%s, %s)", [end, start]).fetchone()
    cluster = float(row[0]) if row else float("nan")
    return (_own_wal(monitor, start, end) if walinspect else None), cluster


def _own_wal(conn: psycopg.Connection[Any], start: str, end: str) -> float:
    """WAL of this database's relations, plus the commit records of the transactions that wrote them."""
    oid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()
    assert oid is not None
    pattern = f"%/{oid[0]}/%"
    row = conn.execute(
        """
        WITH records AS (
            SELECT xid, resource_manager, record_length, block_ref
            FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn)
        ),
        ours AS (SELECT DISTINCT xid FROM records WHERE block_ref LIKE %(pattern)s AND xid <> '0')
        SELECT coalesce(sum(record_length), 0) FROM records
        WHERE block_ref LIKE %(pattern)s
           OR (resource_manager = 'Transaction' AND xid IN (SELECT xid FROM ours))
        """,
        {"start": start, "end": end, "pattern": pattern},
    ).fetchone()
    return float(row[0]) if row else float("nan")


def _connections(report: Report, args: argparse.Namespace, url: str, tmp: Path, concurrency: int) -> None:
    reset_jobs(url)
    name = f"jobq_bench_conn_{concurrency}"
    separator = "&" if "?" in url else "?"
    worker_url = f"{url}{separator}application_name={name}"
    worker = WorkerProcess(
        worker_url,
        "--concurrency",
        str(concurrency),
        "--log-level",
        "warning",
        log_path=tmp / f"connections-{concurrency}.log",
        app="service.examples",
    )
    store = open_store(Settings(database_url=url))
    most = 0
    running_most = 0
    try:
        wait_for(lambda: workers_registered(url, 1), 60, 0.1, "the worker to register")
        store.enqueue_many([NewJob(kind="sleep", payload={"seconds": 0.2}) for _ in range(args.connection_jobs)])
        with psycopg.connect(url, autocommit=True) as conn:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT (SELECT count(*) FROM pg_stat_activity WHERE application_name = %s),"
                    " (SELECT count(*) FROM jobs WHERE state = 'running'),"
                    " EXISTS (SELECT 1 FROM jobs WHERE state IN ('queued', 'running'))",
                    [name],
                ).fetchone()
                assert row is not None
                most = max(most, int(row[0]))
                running_most = max(running_most, int(row[1]))
                if not row[2]:
                    break
                time.sleep(0.01)
    finally:
        store.close()
        worker.stop()
    report.add(
        f"connections, concurrency {concurrency}",
        concurrency=concurrency,
        connections_max=most,
        jobs_running_max=running_most,
        load=load_average(),
    )
