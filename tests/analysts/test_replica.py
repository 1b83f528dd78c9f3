"""Analysts on a streaming replica (docs/ANALYSTS.md, "Long queries: a streaming replica"), on a
primary and a replica of the test's own: initdb and ``pg_basebackup -R``, each in a temporary folder
on a free port (tests/private_postgres.py); the shared server is not touched.

jobq is migrated on the primary, a small synthetic history is written there with the analysts' role
(tests/analysts/synthetic.py, deploy/analysts.sql), and the replica, as the docs set it up
(``hot_standby_feedback = off``), answers every documented query. Then what the docs promise:

- while an analyst's REPEATABLE READ transaction runs for twenty seconds on the replica, the
  primary's horizon is not held: no xmin from the replica (pg_stat_replication.backend_xmin, and
  jobq's own health reading), VACUUM on the primary finds no dead row of ``jobs`` it may not
  remove, and claims on the primary go on; the replica's replay waits for the query instead
  (``max_standby_streaming_delay``), so its data is that much behind until the query ends;
- what it costs: with a short ``max_standby_streaming_delay``, the replica cancels a query whose
  snapshot still needs rows that the primary's vacuum removed ("conflict with recovery");
- and the check can see a pinned horizon: the same churn under a snapshot held on the primary
  leaves dead rows VACUUM may not remove.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import errors
from sqlalchemy.engine import make_url

from service.jobs import Completion
from service.maintenance.rollup import Rollup
from service.store import Store
from service.store.migrate import upgrade
from tests.analysts.roles import analyst_role, apply_role_script
from tests.analysts.synthetic import fill
from tests.analysts.test_queries import QUERIES
from tests.conftest import build_store
from tests.private_postgres import PrivateServer, private_cluster, standby_of
from tests.store.builders import new_job

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres_only(reason="a PostgreSQL primary and its streaming replica"),
    pytest.mark.timeout(300),
]

HISTORY_JOBS = 2_000
LONG_QUERY_SECONDS = 20
# The analysts' replica as deploy/README.md sets it up: the replica's queries never hold the
# primary's horizon; replay waits for them instead, up to this long.
REPLICA_SETTINGS = {"hot_standby_feedback": "off", "max_standby_streaming_delay": "30min"}


def wait_until(condition: Callable[[], bool], seconds: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def rows(url: str, query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()  # type: ignore[arg-type]  # the tests' own literals


def one(url: str, query: str, params: list[Any] | None = None) -> Any:
    [(value,)] = rows(url, query, params)
    return value


def primary_lsn(primary: str) -> str:
    return str(one(primary, "SELECT pg_current_wal_lsn()"))


def replayed(replica: str, lsn: str) -> bool:
    try:
        return bool(one(replica, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [lsn]))
    except psycopg.OperationalError as error:
        # With max_standby_streaming_delay at 1 s, replay cancels a session that is still starting up
        # (reading the catalog) when the primary's vacuum conflicts with it: seen once in 3 full runs
        # on two xdist processes. Replay is then still under way: not caught up yet.
        if "conflict with recovery" not in str(error):
            raise
        return False


def caught_up(primary: str, replica: str) -> None:
    lsn = primary_lsn(primary)
    wait_until(lambda: replayed(replica, lsn), what=f"the replica to replay up to {lsn}")


@dataclass
class ReplicaQuery:
    """An analyst's long transaction on the replica, in a thread: a REPEATABLE READ snapshot taken by
    a first read, then ``seconds`` of pg_sleep (a long report), then the same read again."""

    url: str
    seconds: float
    counts: list[int] = field(default_factory=list)
    error: BaseException | None = None
    pid: int | None = None

    def run(self) -> None:
        try:
            # statement_timeout: the guard rail of the primary replicates with the role; an analyst on
            # the replica raises it for the session, as docs/ANALYSTS.md says.
            with psycopg.connect(self.url, options="-c statement_timeout=10min") as conn:
                conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                self.pid = conn.info.backend_pid
                with conn.transaction():
                    self.counts.append(conn.execute("SELECT count(*) FROM job_history").fetchone()[0])  # type: ignore[index]
                    conn.execute("SELECT pg_sleep(%s)", [self.seconds])
                    self.counts.append(conn.execute("SELECT count(*) FROM job_history").fetchone()[0])  # type: ignore[index]
        except BaseException as exc:  # noqa: BLE001  # reported by the test's thread
            self.error = exc


@contextmanager
def running(query: ReplicaQuery, replica: str) -> Iterator[threading.Thread]:
    def sleeping() -> bool:
        if query.error is not None or query.pid is None:
            return query.error is not None
        return one(replica, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND query LIKE 'SELECT pg_sleep%%'",
                   [query.pid]) == 1  # fmt: skip

    thread = threading.Thread(target=query.run, name="replica-query", daemon=True)
    thread.start()
    try:
        wait_until(sleeping, what="the replica's query to start sleeping")
        assert query.error is None, repr(query.error)
        yield thread
    finally:
        thread.join(timeout=LONG_QUERY_SECONDS + 30)


def churn(store: Store, jobs: int = 50) -> list[float]:
    """Queue work on the primary: enqueue, claim, complete, each row written three times (two dead
    versions per job). Returns how long each claim took."""
    store.enqueue_many([new_job("churn") for _ in range(jobs)])
    took = []
    claimed = []
    while len(claimed) < jobs:
        started = time.monotonic()
        batch = store.claim("primary-worker", ["default"], 10, 60, kinds=["churn"])
        took.append(time.monotonic() - started)
        assert batch, "a claim on the primary found nothing to claim"
        claimed += batch
    store.complete_many([Completion(job.lease, {"ok": True}) for job in claimed])
    return took


VACUUM_TUPLES = re.compile(r"tuples: (\d+) removed, (\d+) remain, (\d+) are dead but not yet removable")


def vacuum_jobs(primary: str) -> tuple[int, int]:
    """VACUUM (VERBOSE) jobs on the primary: (dead rows removed, dead rows it may not remove yet)."""
    messages: list[str] = []
    with psycopg.connect(primary, autocommit=True) as conn:
        conn.add_notice_handler(lambda notice: messages.append(notice.message_primary or ""))
        conn.execute("VACUUM (VERBOSE) jobs")
    [report] = [m for m in messages if re.search(r'finished vacuuming "[^"]*\.public\.jobs"', m)]
    found = VACUUM_TUPLES.search(report)
    assert found, report
    return int(found[1]), int(found[3])


def test_a_long_query_on_the_replica_does_not_hold_the_primary() -> None:
    with private_cluster() as primary_server, standby_of(primary_server, REPLICA_SETTINGS) as replica_server:
        history(primary_server)
        primary = primary_server.url_of("jobq")
        replica = replica_server.url_of("jobq")
        with analyst_role(primary) as (_name, login):
            analyst = make_url(login).set(port=replica_server.port).render_as_string(hide_password=False)
            caught_up(primary, replica)
            documented_queries_answer_on_the_replica(analyst)
            store = build_store(primary)
            try:
                held_query_does_not_pin_the_primary(store, primary, replica, analyst)
                conflicting_query_is_cancelled_with_a_short_delay(store, primary, replica, analyst)
                a_snapshot_on_the_primary_does_pin_it(store, primary)
            finally:
                store.close()


def history(primary: PrivateServer) -> None:
    """jobq migrated on the primary, a small six weeks of history, the daily rollup, the analysts' role."""
    with psycopg.connect(primary.url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE jobq")
    url = primary.url_of("jobq")
    upgrade(url)
    fill(url, jobs=HISTORY_JOBS, days=42, end=datetime.now(UTC))
    store = build_store(url)
    try:
        Rollup(store).run_until_done()
    finally:
        store.close()
    apply_role_script(url)


def documented_queries_answer_on_the_replica(analyst: str) -> None:
    empty = []
    with psycopg.connect(analyst, autocommit=True) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        for query in QUERIES:
            if not conn.execute(query.sql).fetchall():  # type: ignore[arg-type]  # the document's own text
                empty.append(query.title)
        with pytest.raises(errors.ReadOnlySqlTransaction):
            conn.execute("CREATE TEMP TABLE x (y int)")  # a replica: nothing is written there
    assert not empty, f"documented queries that found nothing on the replica: {empty}"


def held_query_does_not_pin_the_primary(store: Store, primary: str, replica: str, analyst: str) -> None:
    query = ReplicaQuery(analyst, LONG_QUERY_SECONDS)
    with running(query, replica) as thread:
        claims = churn(store)
        removed, kept = vacuum_jobs(primary)
        after_vacuum = primary_lsn(primary)
        replication = rows(primary, "SELECT state, backend_xmin::text FROM pg_stat_replication")
        health = store.health_stats()
        claims += churn(store)  # the queue goes on while the replica query runs
        time.sleep(1.0)  # the replica would have replayed that long ago, were it not waiting for the query
        still_behind = not replayed(replica, after_vacuum)
        assert thread.is_alive(), "the replica's query ended before the checks on the primary were done"

    assert query.error is None, repr(query.error)
    assert query.counts[0] == query.counts[1] >= HISTORY_JOBS  # one snapshot for the whole transaction
    assert replication == [("streaming", None)]  # hot_standby_feedback off: the replica sends no xmin
    assert health.replication_xmin_age == 0 and health.oldest_transaction is None
    assert kept == 0 and removed > 0, f"VACUUM on the primary removed {removed} dead rows of jobs, kept {kept}"
    assert max(claims) < 5.0, claims
    assert still_behind, "the replica replayed the primary's vacuum under a query that needed the rows"
    caught_up(primary, replica)


def conflicting_query_is_cancelled_with_a_short_delay(store: Store, primary: str, replica: str, analyst: str) -> None:
    with psycopg.connect(replica, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET max_standby_streaming_delay = '1s'")
        conn.execute("SELECT pg_reload_conf()")
        wait_until(lambda: conn.execute("SHOW max_standby_streaming_delay").fetchone() == ("1s",), what="the reload")
    query = ReplicaQuery(analyst, LONG_QUERY_SECONDS)
    with running(query, replica):
        started = time.monotonic()
        churn(store)
        vacuum_jobs(primary)
    assert isinstance(query.error, errors.SerializationFailure), repr(query.error)
    assert "conflict with recovery" in str(query.error)
    assert time.monotonic() - started < LONG_QUERY_SECONDS / 2
    caught_up(primary, replica)


def a_snapshot_on_the_primary_does_pin_it(store: Store, primary: str) -> None:
    with psycopg.connect(primary) as pinned:
        pinned.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        pinned.execute("SELECT count(*) FROM jobs")
        churn(store)
        _, kept = vacuum_jobs(primary)
        holder = store.health_stats().oldest_transaction
        assert kept > 0, "the check cannot see a pinned horizon"
        assert holder is not None and holder.pid == pinned.info.backend_pid
