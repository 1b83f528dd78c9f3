"""complete_and_claim never waits for a scope counter while it holds the ones it gave back.

One transaction completes a worker's finished jobs (giving their scope slots back, which
locks those counters) and claims for the freed slots (which may wait for other counters).
Two finishers each waiting for a counter the other had just given back deadlocked: 1 s
each until PostgreSQL's deadlock_timeout, and the limited drain fell to a third of the
unlimited one (docs/PERFORMANCE.md). The refill now waits at most REFILL_LOCK_TIMEOUT
there; past it the completion commits on its own and the claim runs after it.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from service.jobs import ClaimedJob, Completion, Lease
from service.limits import Limit
from service.store.base import ClaimRequest
from tests.conftest import Database
from tests.store.builders import LEASE_SECONDS, new_job

pytestmark = pytest.mark.postgres_only(reason="row locks between sessions")


def counter_free(conn: psycopg.Connection, scope: str) -> int | None:
    """The counter's running jobs if no session holds its row, else None."""
    try:
        with conn.transaction():
            row = conn.execute(
                "SELECT running FROM scope_counters WHERE scope = %s FOR UPDATE NOWAIT", (scope,)
            ).fetchone()
            return row[0] if row else None
    except psycopg.errors.LockNotAvailable:
        return None


def test_a_refill_waiting_for_a_counter_holds_none_its_completion_gave_back(make_store, store_url, db: Database):
    store = make_store(store_url)
    store.set_limit(Limit("tenant:*", concurrency=3))
    store.enqueue(new_job(tenant="a"))
    [job] = store.claim("worker-a", ["default"], 1, LEASE_SECONDS)
    store.enqueue(new_job(tenant="b"))
    outcome: list[tuple[list[Lease], list[ClaimedJob]]] = []

    def refill() -> None:
        request = ClaimRequest("worker-a", ("default",), 1, LEASE_SECONDS)
        outcome.append(store.complete_and_claim([Completion(job.lease, None)], request))

    with psycopg.connect(store_url) as holder, psycopg.connect(store_url, autocommit=True) as probe:
        holder.execute("SELECT 1 FROM scope_counters WHERE scope = 'tenant:b' FOR UPDATE")
        thread = threading.Thread(target=refill)
        thread.start()
        try:
            deadline = time.monotonic() + 3
            while counter_free(probe, "tenant:a") != 0:
                assert time.monotonic() < deadline, (
                    "tenant:a's counter stayed held while the claim waited for tenant:b's"
                )
                time.sleep(0.02)
            assert db.scalar("SELECT state FROM jobs WHERE id = %(id)s", id=job.id) == "succeeded"
            assert outcome == [], "the claim went on while tenant:b's counter was held"
        finally:
            holder.rollback()
            thread.join(10)
    [(lost, claimed)] = outcome
    assert lost == [] and [c.tenant for c in claimed] == ["b"]
    assert {u.scope: u.running for u in store.scope_usage()} == {"tenant:a": 0, "tenant:b": 1}
