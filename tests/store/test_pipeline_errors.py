"""A statement's error inside psycopg's pipeline stays that error (issue 26).

Under contention the finisher's pipelined write (COMPLETE_JOBS, then the refill's claim,
with a 50 ms lock_timeout) logged "cannot exit pipeline mode while busy" as
store.unavailable: when the lock timeout's answer came in pieces, psycopg's
Pipeline.__exit__ raised its failure to leave pipeline mode in place of the statement's
LockNotAvailable. The store now translates the statement's own error (the failure's
context): a lock wait, for which complete_and_claim has its fallback, not an outage.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from service.errors import StoreUnavailable
from service.jobs import ClaimRequest, Completion
from service.limits import Limit
from service.store.postgres.errors import LockWaitTooLong, translate_errors
from tests.conftest import Database
from tests.store.builders import LEASE_SECONDS, new_job

pytestmark = pytest.mark.postgres_only(reason="psycopg's pipeline and row locks between sessions")


def _exit_failure_over(cause: psycopg.Error) -> psycopg.Error:
    """The exception psycopg's Pipeline.__exit__ raises when it cannot leave pipeline mode
    after ``cause`` came out of the pipeline's last sync: raised in a ``finally``, so the
    statement's error is its context."""
    try:
        try:
            raise cause
        finally:
            raise psycopg.OperationalError("cannot exit pipeline mode while busy")
    except psycopg.OperationalError as exc:
        return exc


def test_a_lock_timeout_behind_a_pipeline_exit_failure_is_a_lock_wait_not_an_outage() -> None:
    failure = _exit_failure_over(psycopg.errors.LockNotAvailable("canceling statement due to lock timeout"))
    with pytest.raises(LockWaitTooLong), translate_errors():
        raise failure


def test_a_pipeline_exit_failure_on_its_own_is_still_an_outage() -> None:
    with pytest.raises(StoreUnavailable, match="cannot exit pipeline mode"), translate_errors():
        raise psycopg.OperationalError("cannot exit pipeline mode while busy")


def test_a_refill_whose_counter_is_held_retries_once_cleanly_and_keeps_its_connection(
    make_store, store_url: str, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """The lock_timeout fires inside the pipeline; the completion commits alone, the claim runs
    after it (one clean retry), nothing is logged and the pool's connection is reused."""
    store = make_store(store_url)
    store.set_limit(Limit("tenant:*", concurrency=3))
    store.enqueue(new_job(kind="mine", tenant="a"))
    [job] = store.claim("worker-a", ["default"], 1, LEASE_SECONDS, kinds=["mine"])
    store.enqueue(new_job(kind="theirs", tenant="b"))
    fallbacks: list[str] = []
    claim_alone = store._claim_rows

    def counted(statement, params):  # the fallback's claim, after the completion committed alone
        fallbacks.append("claim alone")
        return claim_alone(statement, params)

    store._claim_rows = counted
    outcome: list[object] = []

    def refill() -> None:
        request = ClaimRequest("worker-a", ("default",), 1, LEASE_SECONDS, ("theirs",))
        try:
            outcome.append(store.complete_and_claim([Completion(job.lease, "ok")], request))
        except Exception as exc:  # noqa: BLE001 - the assertion below shows it
            outcome.append(exc)

    with psycopg.connect(store_url) as holder:
        holder.execute("SELECT 1 FROM scope_counters WHERE scope = 'tenant:b' FOR UPDATE")
        thread = threading.Thread(target=refill)
        thread.start()
        time.sleep(0.3)  # well past the refill's 50 ms lock_timeout
        holder.rollback()
        thread.join(10)
    [(lost, claimed)] = outcome  # type: ignore[misc]
    assert lost == [] and [c.kind for c in claimed] == ["theirs"]
    assert fallbacks == ["claim alone"]
    assert db.job(job.id)["state"] == "succeeded"
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")], caplog.records
    stats = store._pool.get_stats()
    assert stats.get("connections_lost", 0) == 0 and stats.get("returns_bad", 0) == 0, stats
