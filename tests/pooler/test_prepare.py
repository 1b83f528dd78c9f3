"""JOBQ_PREPARE's safety net, on a direct PostgreSQL: a prepared statement that is gone from
the session psycopg prepared it on (what a transaction pooler's other server connection looks
like) is found, the statement runs again unprepared, and ``auto`` says once that it stopped
preparing. The pooler itself is found earlier, when a connection is made
(tests/pooler/test_through_pgbouncer.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
import pytest

from service.jobs import NewJob
from service.store import Store
from service.store.postgres.connection import lost_prepared_statement

pytestmark = pytest.mark.postgres_only(reason="prepared statements of PostgreSQL sessions")


def _prepared_names(store: Store) -> list[str]:
    with store._connection() as conn:  # type: ignore[attr-defined]
        return [row["name"] for row in conn.execute("SELECT name FROM pg_prepared_statements")]


def test_a_lost_prepared_statement_stops_auto_preparing_once_and_the_claim_runs_again(
    make_store: Callable[..., Store], pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store(pg_url, notify=False)  # JOBQ_PREPARE=auto, one pooled connection
    store.enqueue_many([NewJob(kind="k") for _ in range(20)])
    claimed = [job for _ in range(8) for job in store.claim("w", ["default"], 1, 30)]
    names = _prepared_names(store)
    assert names, "a direct connection prepares the statements it repeats"
    with store._connection() as conn:  # type: ignore[attr-defined]
        for name in names:  # one by one: psycopg notices only DEALLOCATE ALL
            conn.execute(f'DEALLOCATE "{name}"')

    caplog.set_level(logging.INFO, logger="jobq.store")
    claimed += [job for _ in range(8) for job in store.claim("w", ["default"], 1, 30)]

    assert len(claimed) == 16
    said = [r for r in caplog.records if r.getMessage() == "store.prepare_off"]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    fields = said[0].jobq_fields  # type: ignore[attr-defined]
    assert "does not exist" in fields["why"] and "JOBQ_PREPARE=off" in fields["advice"]
    assert _prepared_names(store) == []  # the connection that lost them was replaced; nothing prepared since


def test_each_way_a_pooler_loses_a_prepared_statement_is_recognised(pg_url: str) -> None:
    """The three errors PostgreSQL answers, as it answers them (no pooler needed to cause them)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("PREPARE _pg3_0(int, int) AS SELECT $1 + $2")
        with pytest.raises(psycopg.Error) as duplicate:
            conn.execute("PREPARE _pg3_0 AS SELECT 1")
        with pytest.raises(psycopg.Error) as missing:
            conn.execute("EXECUTE _pg3_9")
        # Bind to another client's statement of the same name, with our parameters (none):
        bind = psycopg.errors.error_from_result(conn.pgconn.exec_prepared(b"_pg3_0", []))
        with pytest.raises(psycopg.Error) as unrelated:
            conn.execute("SELECT 1 / 0")
    assert lost_prepared_statement(duplicate.value), duplicate.value
    assert lost_prepared_statement(missing.value), missing.value
    assert str(bind).startswith("bind message supplies 0 parameters") and lost_prepared_statement(bind)
    assert not lost_prepared_statement(unrelated.value)
