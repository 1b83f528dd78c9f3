"""bloat: an offered load through phases that pin (or hold back) the xmin horizon (issue 27).

    python -m bench bloat [--rate 800] [--slots 32] [--workers 4] [--autovacuum on|off]
                          [--clean-seconds 60] [--pinned-seconds 240] [--recovery-seconds 180]
                          [--high-seconds 0 --high-rate 1600] [--readers-seconds 0 --readers 2]
                          [--explain]

One process tree, one database of its own. After ``--warmup-seconds`` of the load the
tables are analysed once (autovacuum's analyze, which never runs where autovacuum is off),
so the workers plan for tables under load. An enqueuer (a thread of this process) offers
``--rate`` no-op jobs a second, in batches every 50 ms, to ``--workers`` worker processes
with ``--slots`` slots between them, through these phases, in order:

- **clean**: nothing else runs;
- **pinned**: a session holds ``BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1`` open,
  idle in transaction (a notebook, a BI tool, a forgotten ``BEGIN``): no row version dead
  since it began can be removed, whatever vacuum does;
- **recovery**: the session has ended;
- **high** (``--high-seconds``, off by default): ``--high-rate`` offered, no pin;
- **readers** (``--readers-seconds``, off by default): ``--readers`` sessions each run an
  analyst's query that lasts ``--reader-query-seconds`` (a count over job_attempts, then
  ``pg_sleep``), again and again, staggered: the horizon moves, but never far.

Per phase, from the database's own timestamps: the completion rate (jobs finished in the
phase / its length), the offered rate achieved, claim latency p50/p99 (a job's
``created_at`` to its first attempt's ``started_at``, for the attempts started in the
phase), the queue depth at the phase's end and ``n_dead_tup`` of jobs and job_attempts
then. ``--autovacuum`` sets the reloption ``autovacuum_enabled`` on this database's own
tables (the server's configuration is never touched: where its ``autovacuum`` is off, ``on``
changes nothing, and the report says so). ``--explain`` ends each phase with EXPLAIN
(ANALYZE, BUFFERS) of the idle poll (has_claimable), the claim and a completion, in a
transaction rolled back, and reports each one's time and shared buffers; the plans go to
``--explain-dir``. The poll and the claim twice: as a full walk (``*_full``), and with the
hints a worker's claims leave between full walks (service.store.postgres.heads), as most
claims run.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from bench.common import (
    Report,
    WorkerProcess,
    bench_database,
    load_average,
    scalar,
    wait_for,
    workers_registered,
)
from service.config import Settings
from service.jobs import NewJob
from service.store import open_store
from service.store.postgres.heads import LineHeads, every_line
from service.store.postgres.statements import CLAIM_JOBS, CLAIM_PLANNER, COMPLETE_JOBS, HAS_CLAIMABLE

TICK_SECONDS = 0.05


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=float, default=800.0, help="jobs offered per second")
    parser.add_argument("--slots", type=int, default=32, help="worker slots in all")
    parser.add_argument("--workers", type=int, default=4, help="worker processes sharing the slots")
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=10.0,
        help="the offered load before the phases, then ANALYZE (autovacuum's analyze, which a server with it off never runs)",
    )
    parser.add_argument("--clean-seconds", type=float, default=60.0)
    parser.add_argument("--pinned-seconds", type=float, default=240.0, help="idle in transaction this long")
    parser.add_argument("--recovery-seconds", type=float, default=180.0)
    parser.add_argument("--high-seconds", type=float, default=0.0, help="a phase of --high-rate offered (0: none)")
    parser.add_argument("--high-rate", type=float, default=None, help="jobs/s in the high phase (default 2x --rate)")
    parser.add_argument("--readers-seconds", type=float, default=0.0, help="a phase of long readers (0: none)")
    parser.add_argument("--readers", type=int, default=2, help="sessions running long queries in that phase")
    parser.add_argument("--reader-query-seconds", type=float, default=30.0, help="how long each reader's query lasts")
    parser.add_argument(
        "--autovacuum",
        choices=["on", "off"],
        default="off",
        help="reloption autovacuum_enabled of this database's tables",
    )
    parser.add_argument(
        "--explain", action="store_true", help="EXPLAIN (ANALYZE, BUFFERS) the hot path at each phase end"
    )
    parser.add_argument("--explain-dir", type=Path, default=None, help="where the plans go (default: a temporary dir)")
    parser.add_argument("--log-level", default="warning", help="the workers' --log-level (logs go to a file)")


@dataclass
class Phase:
    name: str
    seconds: float
    rate: float
    pinned: bool = False
    readers: int = 0


def phases(args: argparse.Namespace) -> list[Phase]:
    planned = [
        Phase("clean", args.clean_seconds, args.rate),
        Phase("pinned", args.pinned_seconds, args.rate, pinned=True),
        Phase("recovery", args.recovery_seconds, args.rate),
        Phase("high", args.high_seconds, args.high_rate or 2 * args.rate),
        Phase("readers", args.readers_seconds, args.rate, readers=args.readers),
    ]
    return [phase for phase in planned if phase.seconds > 0]


def run(args: argparse.Namespace) -> Report:
    if args.slots < args.workers or args.workers < 1:
        raise SystemExit("bench bloat: --slots must be at least --workers, and --workers at least 1")
    report = Report("bloat")
    with bench_database(args, "bloat") as url, tempfile.TemporaryDirectory(prefix="jobq-bench-bloat-") as tmp:
        explain_dir = args.explain_dir or Path(tmp)
        explain_dir.mkdir(parents=True, exist_ok=True)
        server_autovacuum = str(scalar(url, "SELECT current_setting('autovacuum')"))
        _set_autovacuum(url, args.autovacuum == "on")
        note = (
            "the server's autovacuum is off: the tables' autovacuum_enabled = on changes nothing"
            if args.autovacuum == "on" and server_autovacuum != "on"
            else ""
        )
        per_worker = [
            args.slots // args.workers + (1 if i < args.slots % args.workers else 0) for i in range(args.workers)
        ]
        workers = [
            WorkerProcess(
                url,
                *("--concurrency", str(slots), "--log-level", args.log_level, "--grace-seconds", "5"),
                log_path=Path(tmp) / f"worker-{i}.log",
            )
            for i, slots in enumerate(per_worker)
        ]
        enqueuer = _Enqueuer(url)
        windows: list[tuple[Phase, datetime, datetime, dict[str, Any]]] = []
        try:
            wait_for(lambda: workers_registered(url, args.workers), 60, 0.1, "the workers to register")
            enqueuer.rate = args.rate
            enqueuer.start()
            time.sleep(args.warmup_seconds)
            with psycopg.connect(url, autocommit=True) as conn:
                # plans made for the tables as they are under load (ANALYZE invalidates the
                # workers' cached ones); never analysed, an empty table's statistics would
                # choose the claim's indexes
                conn.execute("ANALYZE")
            for phase in phases(args):
                started, ended, end_state = _run_phase(url, phase, enqueuer, args, explain_dir)
                windows.append((phase, started, ended, end_state))
        finally:
            enqueuer.stop()
            codes = [w.stop() for w in workers]
        if enqueuer.error is not None:
            raise RuntimeError(f"the enqueuer failed: {enqueuer.error!r}") from enqueuer.error
        clean_rate = clean_p99 = None
        for phase, started, ended, end_state in windows:
            measured = _measured(url, started, ended)
            clean_rate = clean_rate or measured["completed_per_s"]
            clean_p99 = clean_p99 or measured["claim_p99_s"]
            report.add(
                phase.name,
                detail={"explain_dir": str(explain_dir)} if args.explain else None,
                seconds=phase.seconds,
                offered_per_s=phase.rate,
                **measured,
                vs_clean=measured["completed_per_s"] / clean_rate if clean_rate else None,
                p99_vs_clean=measured["claim_p99_s"] / clean_p99 if clean_p99 else None,
                **end_state,
                autovacuum=args.autovacuum,
                server_autovacuum=server_autovacuum,
                note=note,
                worker_exit_codes=",".join(str(c) for c in codes),
                load=load_average(),
            )
    return report


def _set_autovacuum(url: str, enabled: bool) -> None:
    """The reloption on every table of this (the bench's own) database; never the server's setting."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        for table in tables:  # our own table names, never input
            conn.execute(f'ALTER TABLE "{table}" SET (autovacuum_enabled = {"on" if enabled else "off"})')


def _now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def _run_phase(
    url: str, phase: Phase, enqueuer: _Enqueuer, args: argparse.Namespace, explain_dir: Path
) -> tuple[datetime, datetime, dict[str, Any]]:
    """Run one phase; its window on the database clock and the state at its end."""
    with psycopg.connect(url, autocommit=True) as conn:
        pin = psycopg.connect(url, autocommit=True) if phase.pinned else None
        readers = _Readers(url, phase.readers, args.reader_query_seconds) if phase.readers else None
        try:
            if pin is not None:
                pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                pin.execute("SELECT 1")  # takes the snapshot: xmin is pinned from here, idle in transaction
            if readers is not None:
                readers.start()
            enqueuer.rate = phase.rate
            started = _now(conn)
            time.sleep(phase.seconds)
            end_state = _end_state(conn)
            if args.explain:
                end_state.update(_explain(url, conn, phase.name, explain_dir))
            ended = _now(conn)
        finally:
            if readers is not None:
                readers.stop()
            if pin is not None:
                pin.close()  # the transaction ends with its session
    return started, ended, end_state


def _end_state(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    dead = dict(
        conn.execute(
            "SELECT relname, n_dead_tup FROM pg_stat_user_tables WHERE relname IN ('jobs', 'job_attempts')"
        ).fetchall()
    )
    depth = conn.execute("SELECT count(*) FROM jobs WHERE state = 'queued'").fetchone()
    return {
        "queued_at_end": int(depth[0]) if depth else None,
        "dead_jobs": int(dead.get("jobs", 0)),
        "dead_attempts": int(dead.get("job_attempts", 0)),
    }


def _measured(url: str, started: datetime, ended: datetime) -> dict[str, Any]:
    """Rates and claim latency over one phase's window, from the rows' own timestamps."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            """
            SELECT (SELECT count(*) FROM jobs WHERE finished_at >= %(a)s AND finished_at < %(b)s),
                   (SELECT count(*) FROM jobs WHERE created_at >= %(a)s AND created_at < %(b)s),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY w.wait),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY w.wait)
            FROM (
                SELECT extract(epoch FROM a.started_at - j.created_at) AS wait
                FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
                WHERE a.claim = 1 AND a.started_at >= %(a)s AND a.started_at < %(b)s
            ) AS w
            """,
            {"a": started, "b": ended},
        ).fetchone()
    assert row is not None
    span = (ended - started).total_seconds()
    return {
        "completed_per_s": row[0] / span,
        "enqueued_per_s": row[1] / span,
        "claim_p50_s": float(row[2]) if row[2] is not None else None,
        "claim_p99_s": float(row[3]) if row[3] is not None else None,
    }


class _Enqueuer:
    """Offers ``rate`` no-op jobs a second (changeable while it runs), one batch per tick;
    a tick that falls behind is made up in the next (the offered load is kept, not the pace)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.rate = 0.0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        store = open_store(Settings(database_url=self.url))
        try:
            owed = 0.0
            last = time.monotonic()
            while not self._stop.wait(TICK_SECONDS):
                now = time.monotonic()
                owed += self.rate * (now - last)
                last = now
                batch = int(owed)
                if batch:
                    store.enqueue_many([NewJob(kind="noop") for _ in range(batch)])
                    owed -= batch
        except BaseException as error:  # reported by run(), not lost in a thread
            self.error = error
        finally:
            store.close()


class _Readers:
    """``count`` sessions each running a ``seconds``-long analyst's query again and again,
    started ``seconds / count`` apart: the horizon is held back by at most ``seconds``."""

    def __init__(self, url: str, count: int, seconds: float) -> None:
        self.url = url
        self.count = count
        self.seconds = seconds
        self._stop = threading.Event()
        self._conns: list[psycopg.Connection[Any]] = []
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(count)]

    def start(self) -> None:
        self._conns = [psycopg.connect(self.url, autocommit=True) for _ in range(self.count)]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for conn in self._conns:
            conn.cancel()
        for thread in self._threads:
            thread.join(10)
        for conn in self._conns:
            conn.close()

    def _loop(self, index: int) -> None:
        if self._stop.wait(index * self.seconds / self.count):
            return
        conn = self._conns[index]
        while not self._stop.is_set():
            try:
                conn.execute(
                    "SELECT (SELECT count(*) FROM job_attempts WHERE outcome = 'succeeded'), pg_sleep(%s)",
                    [self.seconds],
                )
            except psycopg.errors.QueryCanceled:
                return


# -- EXPLAIN (ANALYZE, BUFFERS) of the hot path ----------------------------------------------------


def _statement_params(statement: str, values: dict[str, Any]) -> dict[str, Any]:
    return {name: values.get(name) for name in set(re.findall(r"%\((\w+)\)s", statement))}


def _explain(url: str, conn: psycopg.Connection[Any], phase: str, directory: Path) -> dict[str, Any]:
    """The poll, the claim and one completion, each EXPLAIN (ANALYZE, BUFFERS), in one
    transaction rolled back (the claim is EXPLAINed and then run, to complete what it took)."""
    worker = f"explain-{uuid.uuid4()}"
    values: dict[str, Any] = {
        "now": None,
        "notify": False,
        "queues": ["default"],
        "kinds": None,
        "cursor": "default",  # a steady worker's: the last tenant it took from (the bench's only one)
        "visit": 4,
        "limit": 8,
        "worker": worker,
        "lease_seconds": 60.0,
        "kind_max_attempts": "{}",
        "items": "[]",
        "recheck": True,
    }
    found: dict[str, Any] = {}
    plans: list[str] = []
    conn.execute("BEGIN")
    store = open_store(Settings(database_url=url))
    try:
        # jobs of the transaction's own, so each claim (EXPLAINed twice, JSON and text, then run) has
        # one to take and the completion one to finish even when the queue is empty
        store.enqueue_many([NewJob(kind="noop") for _ in range(4 * values["limit"])], connection=conn)
        values.update(every_line(values["queues"]))  # the hints of a full walk, and the full poll's lines
        conn.execute(CLAIM_PLANNER)  # as the store runs the poll and the claim (it lasts the transaction)
        found.update(
            _explained(conn, "has_claimable_full", HAS_CLAIMABLE, _statement_params(HAS_CLAIMABLE, values), plans)
        )
        found.update(_explained(conn, "claim_full", CLAIM_JOBS, _statement_params(CLAIM_JOBS, values), plans))
        # then as a worker claims between its full walks: from the heads its claims found
        heads = LineHeads()
        heads.params()  # the claim below is a full walk
        with conn.cursor(row_factory=dict_row) as cur:
            heads.learn(cur.execute(CLAIM_JOBS, _statement_params(CLAIM_JOBS, values)).fetchall())
        values.update({**heads.params(), **heads.poll(values["queues"])})
        found.update(_explained(conn, "has_claimable", HAS_CLAIMABLE, _statement_params(HAS_CLAIMABLE, values), plans))
        found.update(_explained(conn, "claim", CLAIM_JOBS, _statement_params(CLAIM_JOBS, values), plans))
        with conn.cursor(row_factory=dict_row) as cur:
            claimed = cur.execute(CLAIM_JOBS, _statement_params(CLAIM_JOBS, values)).fetchall()
        if claimed:
            job = claimed[0]
            values["batch"] = json.dumps(
                [
                    {
                        "job_id": str(job["id"]),
                        "claim": job["claims"],
                        "attempt": job["attempts"],
                        "owner": worker,
                        "result_id": str(uuid.uuid4()),
                        "body": "{}",
                        "done": None,
                        "total": None,
                    }
                ]
            )
            conn.execute(SORTS_BACK_ON)  # the store runs it behind KEY_LOOKUP_PLANNER, which leaves them on
            found.update(_explained(conn, "complete", COMPLETE_JOBS, _statement_params(COMPLETE_JOBS, values), plans))
    finally:
        conn.execute("ROLLBACK")
        store.close()
    (directory / f"{phase}.txt").write_text("\n\n".join(plans))
    return found


SORTS_BACK_ON = "SELECT set_config('enable_sort', 'on', true), set_config('enable_incremental_sort', 'on', true)"


def _explained(
    conn: psycopg.Connection[Any], name: str, statement: str, params: dict[str, Any], plans: list[str]
) -> dict[str, Any]:
    """One statement's time (ms), the shared buffers it touched, and the index whose scans
    touched most of them (summed over every scan of it in the plan)."""
    [[plan]] = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", params).fetchall()
    text = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {statement}", params).fetchall()
    plans.append(f"-- {name}\n" + "\n".join(r[0] for r in text))
    top = plan[0]["Plan"]
    by_index: dict[str, int] = {}
    for node in _nodes(top):
        if "Index Name" in node:
            touched = node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)
            by_index[node["Index Name"]] = by_index.get(node["Index Name"], 0) + touched
    busiest = max(by_index, key=by_index.__getitem__, default=None)
    return {
        f"{name}_ms": plan[0]["Execution Time"],
        f"{name}_buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
        f"{name}_top_index": f"{busiest} ({by_index[busiest]})" if busiest else None,
    }


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _nodes(child))]
