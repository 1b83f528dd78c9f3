"""The finisher's pipelined write under contention (issue 26).

Under load the finisher's write (COMPLETE_JOBS, then the refill's claim, with the refill's
50 ms lock_timeout) logged "cannot exit pipeline mode while busy" as store.unavailable. The
cause: the lock_timeout bounded the COMMIT too, and a commit of a transaction that sent
NOTIFY waits for PostgreSQL's notify lock, which every notifying commit takes in turn; under
load one waited past 50 ms, and its error answered the pipeline's Sync, which psycopg cannot
pair (see service.store.postgres.errors.pipeline_cause). The refill now lifts its bound before
the commit (REFILL_LOCK_TIMEOUT_END). A lock wait of the refill's own statements still takes
complete_and_claim's fallback, once and silently; and an error a commit may still answer is
translated as itself, not as an outage.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
import pytest

from service.errors import StoreUnavailable
from service.jobs import ClaimRequest, Completion
from service.limits import Limit
from service.store.postgres.errors import LockWaitTooLong, translate_errors
from service.store.postgres.store import PostgresStore
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
    claim_alone = store._behind_claim_planner

    def counted(statement, params):  # the fallback's claim, after the completion committed alone
        fallbacks.append("claim alone")
        return claim_alone(statement, params)

    store._behind_claim_planner = counted
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


NOTIFY_LOCK_HELD = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'object' AND classid = 'pg_database'::regclass "
    "AND objid = 0 AND granted"
)
"""PostgreSQL's notify lock, taken by a committing transaction that sent NOTIFY (PreCommit_Notify)."""


def _commit_holding_the_notify_lock(url: str) -> None:
    """A transaction that sent NOTIFY and wrote a row, committed slowly: its commit takes the
    notify lock, then sleeps 100 ms (commit_delay, the most it allows) in its WAL flush holding it."""
    with psycopg.connect(url) as conn:
        conn.execute("SET commit_delay = 100000")
        conn.execute("SET commit_siblings = 0")
        conn.execute("SELECT pg_notify('jobq_test', 'hold')")
        conn.execute("INSERT INTO notify_holder VALUES (1)")
        conn.commit()


@contextlib.contextmanager
def _counting_fallbacks(store: PostgresStore, fallbacks: list[str]) -> Iterator[None]:
    """complete_and_claim's fallback claims alone (``_behind_claim_planner``) after a lock wait: count them."""
    claim_alone = store._behind_claim_planner

    def counted(statement: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        fallbacks.append("claim alone")
        return claim_alone(statement, params)

    store._behind_claim_planner = counted  # type: ignore[method-assign]
    try:
        yield
    finally:
        del store._behind_claim_planner  # the class's method again


def test_a_refill_whose_commit_queues_for_the_notify_lock_commits_once_and_keeps_its_connection(
    make_store, store_url: str, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """The commit of complete_and_claim waits for another transaction's notify lock, for real:
    past the refill's 50 ms lock_timeout, where it failed before ("cannot exit pipeline mode
    while busy", the completion rolled back, the connection closed). Now it commits when the
    lock frees: no fallback, nothing logged, the pool's connection kept."""
    store: PostgresStore = make_store(store_url)
    db.execute("CREATE TABLE notify_holder (x int)")
    fallbacks: list[str] = []
    waits: list[float] = []
    with psycopg.connect(store_url, autocommit=True) as probe:
        for attempt in range(3):  # until the commit surely waited past 50 ms: the path is provoked
            job = store.enqueue(new_job(kind="mine", tenant="a"))
            [claimed] = store.claim("worker-a", ["default"], 1, LEASE_SECONDS, kinds=["mine"])
            store.enqueue(new_job(kind="theirs", tenant="b"))
            holder = threading.Thread(target=_commit_holding_the_notify_lock, args=(store_url,))
            holder.start()
            deadline = time.monotonic() + 10
            while not probe.execute(NOTIFY_LOCK_HELD).fetchone()[0]:
                assert time.monotonic() < deadline, "the holder's commit never took the notify lock"
            started = time.monotonic()
            request = ClaimRequest("worker-a", ("default",), 1, LEASE_SECONDS, ("theirs",))
            with _counting_fallbacks(store, fallbacks):
                lost, refilled = store.complete_and_claim([Completion(claimed.lease, {"attempt": attempt})], request)
            waits.append(time.monotonic() - started)
            holder.join(10)
            assert lost == [] and [c.kind for c in refilled] == ["theirs"]
            assert db.job(job.id)["state"] == "succeeded"
            store.complete(refilled[0].lease, None)
            if waits[-1] > 0.06:
                break
    assert max(waits) > 0.06, f"the commit never waited past the refill's lock_timeout: {waits}"
    assert fallbacks == []
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")], caplog.records
    stats = store._pool.get_stats()
    assert stats.get("connections_lost", 0) == 0 and stats.get("returns_bad", 0) == 0, stats


def test_a_refill_that_times_out_leaves_psycopgs_prepared_statements_true(
    make_store, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """psycopg (3.3) records a statement it promotes to prepared, at its sixth run on a connection,
    before the answer; in a pipeline the server skips what follows a failed statement, Parse and
    all. Refills that time out on a held counter from the sixth on, on the one pooled connection,
    then clean ones: no statement of the refill is left believed prepared and missing ("prepared
    statement ... does not exist", which the store would read as a pooler's and stop preparing)."""
    store: PostgresStore = make_store(store_url)
    store.set_limit(Limit("tenant:*", concurrency=3))

    def refill(held: bool) -> None:
        store.enqueue(new_job(kind="mine", tenant="a"))
        [job] = store.claim("worker-a", ["default"], 1, LEASE_SECONDS, kinds=["mine"])
        store.enqueue(new_job(kind="theirs", tenant="b"))
        request = ClaimRequest("worker-a", ("default",), 1, LEASE_SECONDS, ("theirs",))
        with psycopg.connect(store_url) as holder:
            if held:
                holder.execute("SELECT 1 FROM scope_counters WHERE scope = 'tenant:b' FOR UPDATE")
                release = threading.Timer(0.3, holder.rollback)  # past the refill's 50 ms, then let go
                release.start()
            lost, [claimed] = store.complete_and_claim([Completion(job.lease, None)], request)
            if held:
                release.join()
        assert lost == [] and claimed.kind == "theirs"
        store.complete(claimed.lease, None)

    for run in range(9):
        refill(held=5 <= run <= 6)
    assert store._preparation.threshold is not None, "the store stopped preparing"
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")], caplog.records
