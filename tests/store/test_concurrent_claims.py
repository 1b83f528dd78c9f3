"""Many OS processes claiming from one queue: every job is claimed exactly once.

PostgreSQL hands rows out through ``FOR UPDATE SKIP LOCKED``; SQLite serialises
claims under ``BEGIN IMMEDIATE`` (fewer jobs there: its writers queue for one lock).
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections import Counter
from typing import Any

import pytest

from tests.conftest import Database
from tests.store.builders import new_job
from tests.store.claimer import claim_and_complete

PROCESSES = 8
JOBS = {"postgresql": 5_000, "sqlite": 1_000}
BATCHES = (1, 2, 5, 10)  # jobs per claim: single claims contend hardest, batches lock several rows


@pytest.mark.slow
def test_eight_processes_claim_every_job_exactly_once(make_store, store_url, db: Database):
    jobs = JOBS[db.dialect]
    store = make_store(store_url, notify=False)
    for first in range(0, jobs, 1_000):
        store.enqueue_many([new_job(payload={"n": n}) for n in range(first, first + 1_000)])

    # A fork server imports the claimer once and forks clean children from it (no
    # threads of this process come along, unlike a plain fork).
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.store.claimer"])
    claim_url = _without_commit_flush(store_url) if db.dialect == "postgresql" else store_url
    start = context.Barrier(PROCESSES)
    results = context.Queue()
    processes = [
        context.Process(
            target=claim_and_complete,
            args=(claim_url, f"proc-{i}", BATCHES[i % len(BATCHES)], start, results),
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
    assert len(completed) == jobs
    assert max(completed.values()) == 1, "a job was completed by two claims"
    assert sum(1 for done in reports.values() if done) >= 2, "only one process ever claimed: no contention"

    assert db.count("jobs", "state = 'succeeded'") == jobs
    assert db.count("jobs", "state <> 'succeeded'") == 0
    assert db.count("jobs", "attempts <> 1") == 0
    assert db.count("job_attempts") == jobs
    assert db.scalar("SELECT count(DISTINCT job_id) AS n FROM job_attempts") == jobs
    assert db.count("job_attempts", "outcome IS DISTINCT FROM 'succeeded'") == 0
    assert db.count("job_results") == jobs


def _without_commit_flush(url: str) -> str:
    """The URL with ``synchronous_commit=off`` for its sessions: a test does not need
    durable commits, and 10,000 commit flushes on a busy disk dominate its time."""
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options=-csynchronous_commit%3Doff"
