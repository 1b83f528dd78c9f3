"""The KEDA ScaledObject's query, taken from deploy/k8s as kustomize renders it, run on a real
migrated PostgreSQL with a known backlog: it answers the workers that the work of the worker's
queues and kinds needs (tests/deploy/test_scaler.py proves the function's rules one by one)."""

from __future__ import annotations

import math
from collections.abc import Callable

import psycopg

from service.jobs import NewJob
from service.store import Store
from tests.deploy.manifests import keda_query, scaled_object


def run_keda_query(url: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(keda_query()).fetchall()


def start(store: Store, queue: str, count: int) -> None:
    """``count`` running jobs in ``queue`` (enqueued at a priority above the rest, then claimed)."""
    store.enqueue_many([NewJob(kind="sleep", queue=queue, priority=900) for _ in range(count)])
    assert len(store.claim("scaler-test", [queue], count, 300)) == count


def test_keda_query_answers_workers_needed(pg_url: str, make_store: Callable[..., Store]) -> None:
    store = make_store(pg_url)
    assert run_keda_query(pg_url) == [(0.0,)], "an empty queue needs no worker"

    # Finished work counts for nothing: 6 succeeded jobs.
    store.enqueue_many([NewJob(kind="classify", priority=1000) for _ in range(6)])
    for job in store.claim("scaler-test", ["default"], 6, 300):
        store.complete(job.lease, {"ok": True})
    start(store, "default", 3)  # running: their workers must not be scaled away
    store.enqueue_many([NewJob(kind="classify") for _ in range(10)])  # due
    store.enqueue_many([NewJob(kind="classify", delay_seconds=3600) for _ in range(4)])  # not due for an hour
    store.enqueue_many([NewJob(kind="resize") for _ in range(8)])  # service.examples has no such handler
    start(store, "other", 2)  # another queue's work is not this ScaledObject's
    store.enqueue_many([NewJob(kind="classify", queue="other") for _ in range(5)])

    rows = run_keda_query(pg_url)
    assert len(rows) == 1 and len(rows[0]) == 1, "KEDA reads one number"
    (workers_needed,) = rows[0]
    assert workers_needed == (10 + 3) / 4  # due queued + running in 'default', over 4 slots per worker
    target = float(scaled_object()["spec"]["triggers"][0]["metadata"]["targetQueryValue"])
    assert math.ceil(workers_needed / target) == 4  # what the HPA then asks for
