"""What holds back vacuum, shown where operators look: the oldest open transaction on the database,
its age and who holds it (pid, role, application, state), and the xmin replication holds, in
``store.health_stats``, ``jobq stats`` (table and --json) and ``/metrics``. SQLite measures none
of it and says nothing, without an error."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.metrics import read_snapshot, render
from service.store import Store
from service.store.base import DatabaseHealth
from service.store.migrate import upgrade
from tests.conftest import build_store
from tests.ops.conftest import Run
from tests.ops.test_metrics import scrape
from tests.private_postgres import private_cluster

APP = "analyst-notebook"


@pytest.fixture
def idle_in_transaction(store_url: str) -> Iterator[psycopg.Connection[Any]]:
    """Another client, left idle in an open REPEATABLE READ transaction (a report's snapshot, then a
    forgotten session): its snapshot holds the horizon."""
    with psycopg.connect(store_url, application_name=APP) as conn:  # not autocommit: the SELECT opens one
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.execute("SELECT 1")
        yield conn


def health_once_older_than(store: Store, seconds: float) -> DatabaseHealth:
    """health_stats once the oldest transaction is at least ``seconds`` old (a wait, not a sleep)."""
    deadline = time.monotonic() + 30
    while True:
        health = store.health_stats()
        age = health.oldest_transaction_age_seconds
        if (age is not None and age >= seconds) or time.monotonic() > deadline:
            return health
        time.sleep(0.1)


@pytest.mark.postgres_only(reason="PostgreSQL's pg_stat_activity; SQLite has no transaction registry")
def test_the_store_names_who_holds_the_oldest_transaction_and_its_age_grows(
    live: Store, idle_in_transaction: psycopg.Connection[Any]
) -> None:
    first = health_once_older_than(live, 0.5)
    later = health_once_older_than(live, 1.5)

    assert first.oldest_transaction_age_seconds is not None and later.oldest_transaction_age_seconds is not None
    assert 0.5 <= first.oldest_transaction_age_seconds < later.oldest_transaction_age_seconds
    holder = later.oldest_transaction
    assert holder is not None
    assert holder.pid == idle_in_transaction.info.backend_pid
    assert (holder.usename, holder.application_name, holder.state) == ("postgres", APP, "idle in transaction")
    assert isinstance(holder.xmin_age, int) and holder.xmin_age >= 0  # its snapshot holds the horizon
    assert later.replication_xmin_age == 0  # no slot, no standby

    idle_in_transaction.commit()
    after = live.health_stats()
    assert after.oldest_transaction is None and after.oldest_transaction_age_seconds == 0.0


@pytest.mark.postgres_only(reason="PostgreSQL's pg_stat_activity; SQLite has no transaction registry")
def test_a_read_committed_transaction_between_statements_shows_it_holds_no_snapshot(
    live: Store, store_url: str
) -> None:
    # Open, but between statements of READ COMMITTED with no write: no snapshot, no xid, so it
    # holds no row back (it still holds its locks): shown, with no xmin.
    with psycopg.connect(store_url, application_name=APP) as conn:
        conn.execute("SELECT 1")
        holder = live.health_stats().oldest_transaction
        assert holder is not None and holder.pid == conn.info.backend_pid and holder.xmin_age is None
        conn.execute("SELECT pg_current_xact_id()")  # now it has an xid, as after any write
        holder = live.health_stats().oldest_transaction
        assert holder is not None and isinstance(holder.xmin_age, int)


@pytest.mark.postgres_only(reason="PostgreSQL's pg_stat_activity; SQLite has no transaction registry")
def test_the_store_leaves_its_own_query_out(live: Store) -> None:
    # Nothing else is open: the read's own transaction is not "the oldest transaction".
    health = live.health_stats()
    assert health.oldest_transaction is None and health.oldest_transaction_age_seconds == 0.0


@pytest.mark.postgres_only(reason="PostgreSQL's pg_stat_activity; SQLite has no transaction registry")
def test_stats_shows_the_oldest_transaction_and_who_holds_it(
    cli: Run, live: Store, idle_in_transaction: psycopg.Connection[Any]
) -> None:
    health_once_older_than(live, 1.0)
    pid = idle_in_transaction.info.backend_pid

    report = json.loads(cli("stats", "--json").stdout)["database"]
    assert report["oldest_transaction_age_seconds"] >= 1.0
    holder = report["oldest_transaction"]
    assert isinstance(holder.pop("xmin_age"), int)
    assert holder == {"pid": pid, "usename": "postgres", "application_name": APP, "state": "idle in transaction"}
    assert report["replication_xmin_age"] == 0

    table = cli("stats")
    assert table.returncode == 0, table.stderr
    [line] = [line for line in table.stdout.splitlines() if line.startswith("oldest open transaction:")]
    assert f", pid {pid} postgres ({APP}), idle in transaction, xmin age " in line, line
    assert "replication holds back vacuum by: 0 transactions" in table.stdout


@pytest.mark.postgres_only(reason="PostgreSQL's pg_stat_activity; SQLite has no transaction registry")
def test_metrics_show_the_oldest_transactions_age_growing_and_who_holds_it(
    live: Store,
    start_api: Callable[..., Any],
    store_url: str,
    idle_in_transaction: psycopg.Connection[Any],
) -> None:
    def metrics() -> dict[str, Any]:
        text = render(read_snapshot(live)).decode()
        return {family.name: family.samples for family in text_string_to_metric_families(text)}

    health_once_older_than(live, 0.5)
    first = metrics()["jobq_oldest_transaction_age_seconds"][0].value
    health_once_older_than(live, first + 1.0)
    later = metrics()
    assert 0.5 <= first < later["jobq_oldest_transaction_age_seconds"][0].value
    [info] = later["jobq_oldest_transaction_info"]
    assert info.value == 1 and info.labels == {
        "pid": str(idle_in_transaction.info.backend_pid), "usename": "postgres", "application_name": APP,
        "state": "idle in transaction",
    }  # fmt: skip
    assert later["jobq_replication_xmin_age_transactions"][0].value == 0

    served = scrape(start_api(store_url), None)  # the same through the API's /metrics
    [info] = served["jobq_oldest_transaction_info"]
    assert info.labels["application_name"] == APP

    idle_in_transaction.commit()
    assert metrics()["jobq_oldest_transaction_info"] == []  # the family, with no holder to name


def test_sqlite_reports_none_of_it_without_error(cli: Run, live: Store, store_url: str) -> None:
    if not store_url.startswith("sqlite"):
        pytest.skip("what SQLite answers; PostgreSQL's is above")
    health = live.health_stats()
    assert (health.oldest_transaction_age_seconds, health.oldest_transaction, health.replication_xmin_age) == (
        None, None, None,
    )  # fmt: skip
    assert json.loads(cli("stats", "--json").stdout)["database"] is None
    table = cli("stats")
    assert table.returncode == 0 and "transaction" not in table.stdout, table.stdout
    text = render(read_snapshot(live)).decode()
    assert "jobq_oldest_transaction" not in text and "jobq_replication_xmin" not in text


@pytest.mark.slow
def test_a_prepared_transaction_counts_as_open_since_it_was_prepared() -> None:
    # A prepared transaction has no backend, so pg_stat_activity never shows it, yet it holds the
    # horizon until COMMIT/ROLLBACK PREPARED. The shared server allows none (max_prepared_transactions
    # is 0 there, and is not ours to change): a private cluster does.
    with private_cluster({"max_prepared_transactions": "2"}) as server:
        upgrade(server.url)
        store = build_store(server.url)
        try:
            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute("BEGIN")
                conn.execute("SELECT pg_current_xact_id()")  # it holds an xid, as any writer does
                conn.execute("PREPARE TRANSACTION 'jobq-test-2pc'")
                health = health_once_older_than(store, 1.0)
                holder = health.oldest_transaction
                assert holder is not None and health.oldest_transaction_age_seconds is not None
                assert (holder.pid, holder.usename, holder.state) == (None, "postgres", "prepared")
                assert health.oldest_transaction_age_seconds >= 1.0 and isinstance(holder.xmin_age, int)
                conn.execute("ROLLBACK PREPARED 'jobq-test-2pc'")
            assert store.health_stats().oldest_transaction is None
        finally:
            store.close()
