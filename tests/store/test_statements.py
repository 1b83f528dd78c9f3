"""Every named statement of both stores compiles against a migrated database, so a typo
cannot hide in a statement that runs rarely (a limit change, a replay by failure group):
PostgreSQL PREPAREs each one, SQLite EXPLAINs each one.

The statements are every ``-- name:`` of the .sql files each store loads (its own and the
dialect-neutral ones, service.store.sqlfiles), so a new statement is covered the day it is
written. A fragment ({{room(c)}}, {{status_columns}}) is compiled inside each statement
that includes it.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sqlite3
from collections.abc import Callable

import psycopg
import pytest

from service.store.sqlfiles import Dialect, statements
from service.store.sqlite import SqliteStore

VERBS = ("SELECT", "WITH", "INSERT", "UPDATE", "DELETE", "LOCK", "SET")


def named_statements(dialect: Dialect) -> dict[str, str]:
    """name -> SQL for every statement the store of ``dialect`` loads."""
    return dict(statements(dialect))


def test_the_stores_modules_hold_no_sql_of_their_own() -> None:
    """Every upper-case SQL constant of a store module is a statement of the files, so
    nothing escapes the compile checks below (or the golden files)."""
    for dialect in ("postgres", "sqlite"):
        loaded = set(statements(dialect).values())
        package = importlib.import_module(f"service.store.{dialect}")
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for name, value in vars(module).items():
                words = value.split(None, 1) if isinstance(value, str) and name.isupper() else []
                if words and words[0].upper() in VERBS:
                    assert value in loaded, f"{module.__name__}.{name} is SQL that is not in a .sql file"


def _pg_prepare(conn: psycopg.Connection, statement: str) -> None:
    """PREPARE with $n placeholders, as psycopg binds %(name)s (the same name, the same number)."""
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    text = re.sub(r"%\((\w+)\)s", number, statement).replace("%%", "%")
    if text.lstrip().upper().startswith(("LOCK", "SET")):  # not preparable: run it, and roll it back
        with conn.transaction(force_rollback=True):
            conn.execute(text)
        return
    conn.execute("PREPARE checked AS " + text)
    conn.execute("DEALLOCATE checked")


def _sqlite_explain(store: SqliteStore, statement: str) -> None:
    names = set(re.findall(r":(\w+)", statement))
    # the store's own connection: the statements run with its functions (width_bucket)
    store._conn.execute("EXPLAIN " + statement, dict.fromkeys(names)).fetchall()


def test_the_statements_are_found_in_every_area_of_both_stores() -> None:
    pg = named_statements("postgres")
    lite = named_statements("sqlite")
    for names in (pg, lite):
        # the hot path, the reads, and statements from the area modules
        assert {"claim_jobs" if names is pg else "claim_job", "get_job", "enqueue_jobs", "set_limit"} <= set(names)
        assert {"reap_expired", "cancel_job", "read_attempt_receipt", "create_token", "list_items"} <= set(names)
        assert "status_columns" not in names  # a fragment, compiled inside the statements that include it
    assert "item_deltas" not in pg and "lock_counters" in pg
    assert len(pg) >= 50 and len(lite) >= 60


def _failures(statements: dict[str, str], compile: Callable[[str], None], error: type[Exception]) -> list[str]:
    """Each statement that does not compile, with the database's reason."""
    failures = []
    for name, statement in sorted(statements.items()):
        try:
            compile(statement)
        except error as exc:
            failures.append(f"{name}: {str(exc).strip()}")
    return failures


def test_every_postgres_statement_prepares(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedColumn):  # the check can fail: a typo is caught
            _pg_prepare(conn, "SELECT stat FROM jobs WHERE id = %(job_id)s")
        failures = _failures(
            named_statements("postgres"), lambda statement: _pg_prepare(conn, statement), psycopg.Error
        )
    assert not failures, "\n".join(failures)


def test_every_sqlite_statement_compiles(sqlite_url: str) -> None:
    store = SqliteStore(sqlite_url)
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such column"):  # the check can fail: a typo is caught
            _sqlite_explain(store, "SELECT stat FROM jobs WHERE id = :job_id")
        failures = _failures(
            named_statements("sqlite"), lambda statement: _sqlite_explain(store, statement), sqlite3.Error
        )
    finally:
        store.close()
    assert not failures, "\n".join(failures)
