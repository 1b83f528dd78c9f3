"""The SQLite store's write transactions: a COMMIT that fails rolls the transaction back, so
the store's one connection is never left inside a transaction no later write can begin."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable

import pytest

from service.errors import JobqError
from service.store import Store
from tests.store.builders import claim_one, new_job


def test_a_write_whose_commit_fails_writes_nothing_and_the_next_write_goes_through(
    make_store: Callable[..., Store], sqlite_url: str
) -> None:
    store = make_store(sqlite_url)
    # A deferred foreign key is checked at COMMIT, which then fails, and SQLite keeps the
    # transaction open: the one way a test can make a COMMIT fail on a healthy file.
    with pytest.raises((JobqError, sqlite3.Error)):
        with store._write() as (conn, _now):  # type: ignore[attr-defined]  # the plumbing under test
            conn.execute("PRAGMA defer_foreign_keys = ON")
            conn.execute(
                "INSERT INTO job_attempts (job_id, claim, attempt, worker, due_at, started_at) VALUES (?, 1, 1, 'w', ?, ?)",
                (str(uuid.uuid4()), "2030-01-01T00:00:00.000000Z", "2030-01-01T00:00:00.000000Z"),
            )

    job = store.enqueue(new_job())
    assert claim_one(store).id == job.id
    assert not store._conn.in_transaction  # type: ignore[attr-defined]
