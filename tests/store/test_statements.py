"""Every named statement of both stores compiles against a migrated database, so a typo
cannot hide in a statement that runs rarely (a limit change, a replay by failure group):
PostgreSQL PREPAREs each one, SQLite EXPLAINs each one.

The statements are found by reading the store packages' modules (every public upper-case
string that begins with a SQL verb), so a new statement, or a new area module, is covered
the day it is written. A piece that statements embed (STATUS_COLUMNS, ITEM_DELTAS) is
compiled inside each statement that embeds it.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sqlite3
from collections.abc import Callable

import psycopg
import pytest

from service.store.sqlite import SqliteStore

VERBS = ("SELECT", "WITH", "INSERT", "UPDATE", "DELETE", "LOCK", "SET")


def named_statements(package: str) -> dict[str, str]:
    """NAME -> SQL for every statement of the modules of ``package`` (a name imported into
    another module is the same statement; two different texts under one name are a defect)."""
    found: dict[str, str] = {}
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        module = importlib.import_module(f"{package}.{info.name}")
        for name, value in vars(module).items():
            if not (name.isupper() and not name.startswith("_") and isinstance(value, str)):
                continue
            words = value.split(None, 1)
            if not words or words[0].upper() not in VERBS:
                continue
            assert found.setdefault(name, value) == value, f"{package}: two statements are named {name}"
    return {name: text for name, text in found.items() if not any(other != text and text in other for other in found.values())}


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
    pg = named_statements("service.store.postgres")
    lite = named_statements("service.store.sqlite")
    for names in (pg, lite):
        # the hot path, the reads, and statements from the area modules
        assert {"CLAIM_JOBS" if names is pg else "CLAIM_JOB", "GET_JOB", "ENQUEUE_JOBS", "SET_LIMIT"} <= set(names)
        assert {"REAP_EXPIRED", "CANCEL_JOB", "READ_ATTEMPT_RECEIPT", "CREATE_TOKEN", "LIST_ITEMS"} <= set(names)
        assert "STATUS_COLUMNS" not in names  # a piece, compiled inside the statements that embed it
    assert "ITEM_DELTAS" not in pg and "LOCK_COUNTERS" in pg
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
            named_statements("service.store.postgres"), lambda statement: _pg_prepare(conn, statement), psycopg.Error
        )
    assert not failures, "\n".join(failures)


def test_every_sqlite_statement_compiles(sqlite_url: str) -> None:
    store = SqliteStore(sqlite_url)
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such column"):  # the check can fail: a typo is caught
            _sqlite_explain(store, "SELECT stat FROM jobs WHERE id = :job_id")
        failures = _failures(
            named_statements("service.store.sqlite"), lambda statement: _sqlite_explain(store, statement), sqlite3.Error
        )
    finally:
        store.close()
    assert not failures, "\n".join(failures)
