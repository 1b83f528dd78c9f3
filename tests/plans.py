"""Query plans on a table that holds history: a statement that reads ``jobs`` or
``job_attempts`` whole is the statement that makes a page or a scrape slow at a million
jobs (docs/PERFORMANCE.md). Shared by the console's plan test and /metrics' one.

``seed`` writes 20,000 finished jobs (and their attempts) over a week plus a few active
ones, then analyses; ``full_scans`` names the history tables a statement's plan reads whole.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.conftest import Database
from tests.store.builders import claim_one, new_job

HISTORY = 20_000

HISTORY_TABLES = {"jobs", "job_attempts"}

WORKFLOW_SIZE = 20
"""The seed's first 2,000 jobs are workflows of this many jobs each (the rest are independent)."""


def seeded_workflow(dialect: str, n: int = 5) -> str:
    """The id of the seed's workflow number ``n`` (as ``seed`` writes it on each store)."""
    if dialect == "postgresql":
        return str(uuid.UUID(hashlib.md5(f"w{n}".encode()).hexdigest()))
    return f"00000000-0000-7000-9000-{n:012d}"


def params(statement: str, job_id: str, dialect: str, **given: Any) -> dict[str, Any]:
    """The parameters ``statement`` names, with plausible values (``given`` ones win)."""
    now = datetime.now(UTC)
    day_ago: Any = now - timedelta(hours=24)
    values: dict[str, Any] = {
        "now": None,
        "window": 3600.0,
        "buckets": 12,
        "bucket_seconds": 300.0,
        "within": 30.0,
        "tenant": "t7",
        "state": None,
        "kind": None,
        "queue": None,
        "created_after": None,
        "created_before": None,
        "idempotency_key": None,
        "concurrency_key": None,
        "workflow_id": None,
        "error_like": None,
        "after_id": None,
        "before_id": None,
        "by": "queue",
        "first_day": (now - timedelta(days=6)).date(),
        "limit": 51,
        "job_id": job_id,
        "since": day_ago,
        "bounds": [0.1, 1.0, 10.0],
        "scopes": None,
        "after_index": -1,
        "low": job_id[:9] + "0000-0000-0000-000000000000"[: 36 - 9],
        "high": job_id[:9] + "ffff-ffff-ffff-ffffffffffff"[: 36 - 9],
    }
    if dialect == "sqlite":  # SQLite's store binds times as its sortable UTC text
        values["now"] = now.strftime("%Y-%m-%d %H:%M:%S.000")
        values["since"] = day_ago.strftime("%Y-%m-%d %H:%M:%S.000")
        values["bounds"] = json.dumps(values["bounds"])
        values["first_day"] = values["first_day"].isoformat()
    values.update(given)
    pattern = r"%\((\w+)\)s" if dialect == "postgresql" else r":(\w+)"
    return {name: values[name] for name in set(re.findall(pattern, statement))}


def seed(db: Database, make_store: Any, url: str) -> str:
    if db.dialect == "postgresql":
        db.execute(
            """
            INSERT INTO jobs (id, tenant, queue, kind, payload, state, attempts, max_attempts, error, error_group,
                              run_after, created_at, updated_at, started_at, finished_at, idempotency_key,
                              concurrency_key, workflow_id)
            SELECT gen_random_uuid(), 't' || (g %% 50), 'q' || (g %% 4), 'k' || (g %% 7), '{}'::jsonb,
                   CASE WHEN g %% 9 = 0 THEN 'failed' ELSE 'succeeded' END, 1, 3,
                   CASE WHEN g %% 9 = 0 THEN 'ValueError: ' || (g %% 5) END,
                   CASE WHEN g %% 9 = 0 THEN 'ValueError: N' END, ts, ts, ts, ts, ts,
                   CASE WHEN g %% 3 = 0 THEN 'order-' || g END, CASE WHEN g %% 2 = 0 THEN 'c' || (g %% 100) END,
                   CASE WHEN g <= 2000 THEN md5('w' || (g / %(size)s))::uuid END
            FROM generate_series(1, %(n)s) AS g, LATERAL (SELECT now() - make_interval(secs => g * 30) AS ts) AS t
            """,
            n=HISTORY,
            size=WORKFLOW_SIZE,
        )
        db.execute(
            """INSERT INTO job_attempts (job_id, claim, attempt, worker, due_at, started_at, finished_at, outcome)
               SELECT id, 1, 1, 'w', created_at, started_at, finished_at, state FROM jobs"""
        )
    else:
        db.execute(
            """
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < %(n)s)
            INSERT INTO jobs (id, tenant, queue, kind, payload, state, attempts, max_attempts, error, error_group,
                              run_after, created_at, updated_at, started_at, finished_at, idempotency_key,
                              concurrency_key, workflow_id)
            SELECT printf('00000000-0000-7000-8000-%012d', n), 't' || (n % 50), 'q' || (n % 4), 'k' || (n % 7), '{}',
                   CASE WHEN n % 9 = 0 THEN 'failed' ELSE 'succeeded' END, 1, 3,
                   CASE WHEN n % 9 = 0 THEN 'ValueError: ' || (n % 5) END,
                   CASE WHEN n % 9 = 0 THEN 'ValueError: N' END, ts, ts, ts, ts, ts,
                   CASE WHEN n % 3 = 0 THEN 'order-' || n END, CASE WHEN n % 2 = 0 THEN 'c' || (n % 100) END,
                   CASE WHEN n <= 2000 THEN printf('00000000-0000-7000-9000-%012d', n / %(size)s) END
            FROM (SELECT n, strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (n * 30) || ' seconds') AS ts FROM g)
            """,
            n=HISTORY,
            size=WORKFLOW_SIZE,
        )
        db.execute(
            """INSERT INTO job_attempts (job_id, claim, attempt, worker, due_at, started_at, finished_at, outcome)
               SELECT id, 1, 1, 'w', created_at, started_at, finished_at, state FROM jobs"""
        )
    store = make_store(url)
    store.enqueue_many([new_job(queue=f"q{i % 4}") for i in range(20)])
    running = claim_one(store, queues=("q0",))
    db.execute("ANALYZE")
    return str(running.id)


def explained(row: dict[str, Any]) -> Any:
    """The plan in a row of ``EXPLAIN (FORMAT JSON)``, decoded (psycopg may hand it over as text)."""
    plan = next(iter(row.values()))
    return json.loads(plan) if isinstance(plan, str) else plan


def plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    """``node`` and every node below it."""
    nodes, pending = [], [node]
    while pending:
        node = pending.pop()
        nodes.append(node)
        pending.extend(node.get("Plans", []))
    return nodes


def pg_plan_nodes(db: Database, statement: str, params: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    """Every node of PostgreSQL's plan for ``statement`` (EXPLAIN, not run), and the plan."""
    [row] = db.rows("EXPLAIN (FORMAT JSON) " + statement, **params)
    plan = explained(row)
    return plan_nodes(plan[0]["Plan"]), plan


def _pg_full_scans(db: Database, statement: str, params: dict[str, Any]) -> tuple[list[str], str]:
    nodes, plan = pg_plan_nodes(db, statement, params)
    scans = [
        n["Relation Name"] for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") in HISTORY_TABLES
    ]
    return scans, json.dumps(plan, indent=1)


def _sqlite_full_scans(db: Database, statement: str, params: dict[str, Any]) -> tuple[list[str], str]:
    # The store registers width_bucket on its own connection (the histograms use it); planning needs its name only.
    assert db._sqlite is not None
    db._sqlite.create_function("width_bucket", 2, lambda value, bounds: None, deterministic=True)
    rows = db.rows("EXPLAIN QUERY PLAN " + statement, **params)
    details = [str(r["detail"]) for r in rows]
    # "SCAN jobs" alone reads the table whole; "SCAN jobs USING INDEX …" walks an index in order.
    scans = [d for d in details if re.fullmatch(r"SCAN (jobs|job_attempts)( AS \w+)?", d)]
    return scans, "\n".join(details)


def full_scans(db: Database, statement: str, job_id: str, **given: Any) -> tuple[list[str], str]:
    """The history tables ``statement`` reads whole on ``db``'s store, and its plan to show
    (its parameters from ``params``, ``given`` ones first)."""
    explain = _pg_full_scans if db.dialect == "postgresql" else _sqlite_full_scans
    return explain(db, statement, params(statement, job_id, db.dialect, **given))
