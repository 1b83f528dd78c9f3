"""PostgreSQL's claim under real concurrency, and its query plan.

These need what only PostgreSQL has: many processes claiming through
``FOR UPDATE SKIP LOCKED``, and a planner whose choice of index can be asserted.
"""

from __future__ import annotations

import json
import multiprocessing
import queue
import re
import time
from collections import Counter
from typing import Any

import pytest

from service.store.postgres import CLAIM_JOBS
from tests.conftest import Database
from tests.store.builders import new_job
from tests.store.claimer import claim_and_complete

pytestmark = pytest.mark.postgres_only(reason="needs FOR UPDATE SKIP LOCKED and PostgreSQL's planner")

PROCESSES = 8
JOBS = 5_000
BATCHES = (1, 2, 5, 10)  # jobs per claim: single claims contend hardest, batches lock several rows


@pytest.mark.slow
def test_eight_processes_claim_every_job_exactly_once(make_store, store_url, db: Database):
    store = make_store(store_url, notify=False)
    for start in range(0, JOBS, 1_000):
        store.enqueue_many([new_job(payload={"n": n}) for n in range(start, start + 1_000)])

    # A fork server imports the claimer once and forks clean children from it (no
    # threads of this process come along, unlike a plain fork).
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.store.claimer"])
    start = context.Barrier(PROCESSES)
    results = context.Queue()
    processes = [
        context.Process(
            target=claim_and_complete,
            args=(_without_commit_flush(store_url), f"proc-{i}", BATCHES[i % len(BATCHES)], start, results),
            name=f"claimer-{i}",
        )
        for i in range(PROCESSES)
    ]
    began = time.monotonic()
    for process in processes:
        process.start()
    reports: dict[str, Any] = {}
    try:
        while len(reports) < PROCESSES:
            worker, report = results.get(timeout=max(1.0, 120 - (time.monotonic() - began)))
            reports[worker] = report
    except queue.Empty:
        pytest.fail(f"claimers did not finish within 120 s; reported: {sorted(reports)}")
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()

    errors = {w: r for w, r in reports.items() if isinstance(r, str)}
    assert not errors, errors
    completed = Counter(job for done in reports.values() for job in done)
    assert len(completed) == JOBS
    assert max(completed.values()) == 1, "a job was completed by two claims"
    assert sum(1 for done in reports.values() if done) >= 2, "only one process ever claimed: no contention"

    assert db.count("jobs", "state = 'succeeded'") == JOBS
    assert db.count("jobs", "state <> 'succeeded'") == 0
    assert db.count("jobs", "attempts <> 1") == 0
    assert db.count("job_attempts") == JOBS
    assert db.scalar("SELECT count(DISTINCT job_id) AS n FROM job_attempts") == JOBS
    assert db.count("job_attempts", "outcome IS DISTINCT FROM 'succeeded'") == 0
    assert db.count("job_results") == JOBS


def _without_commit_flush(url: str) -> str:
    """The URL with ``synchronous_commit=off`` for its sessions: a test does not need
    durable commits, and 10,000 commit flushes on a busy disk dominate its time."""
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options=-csynchronous_commit%3Doff"


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [node]
    for child in node.get("Plans", []):
        nodes += _plan_nodes(child)
    return nodes


def _claim_params(**values: Any) -> dict[str, Any]:
    """Every parameter CLAIM_JOBS names: the given ones, NULL (or off) for the rest."""
    defaults: dict[str, Any] = {
        "now": None,
        "worker": "explain",
        "queues": ["default"],
        "kinds": None,
        "limit": 10,
        "lease_seconds": 30.0,
        "notify": False,
    }
    names = set(re.findall(r"%\((\w+)\)s", CLAIM_JOBS))
    return {name: values.get(name, defaults.get(name)) for name in names}


def test_the_claim_reads_only_the_claimable_index_however_long_the_history(make_store, store_url, db):
    db.execute(
        """
        INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                          error, run_after, created_at, updated_at, finished_at)
        SELECT gen_random_uuid(), 't' || (g % 50), 'default', 'resize', '{}'::jsonb,
               (ARRAY['succeeded', 'succeeded', 'succeeded', 'failed', 'cancelled'])[1 + g % 5],
               g % 10, 1, 3,
               CASE WHEN g % 5 = 3 THEN 'boom' END,
               ts, ts, ts, ts
        FROM generate_series(1, 50000) AS g,
             LATERAL (SELECT now() - make_interval(secs => g * 10) AS ts) AS t
        """
    )
    make_store(store_url).enqueue_many([new_job(priority=i % 3) for i in range(20)])
    db.execute("ANALYZE jobs")

    for kinds in (None, ["resize"]):
        # EXPLAIN without ANALYZE plans the claim but does not run it: nothing is claimed.
        [row] = db.rows("EXPLAIN (FORMAT JSON) " + CLAIM_JOBS, **_claim_params(kinds=kinds))
        plan = next(iter(row.values()))
        plan = json.loads(plan) if isinstance(plan, str) else plan
        nodes = _plan_nodes(plan[0]["Plan"])
        shown = json.dumps(plan, indent=1)

        index_scans = {n.get("Index Name") for n in nodes if n.get("Relation Name") == "jobs"}
        assert "ix_jobs_claimable" in index_scans, f"kinds={kinds}: the claim does not use ix_jobs_claimable\n{shown}"
        seq_scans = [n for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs"]
        assert not seq_scans, f"kinds={kinds}: the claim scans the whole jobs table\n{shown}"
    assert db.count("jobs", "state = 'queued'") == 20
