"""The SQLite store's plumbing, which every area of it builds on: the one connection
under a lock, write transactions (BEGIN IMMEDIATE) and reads, the instant each began,
the readers of SQLite's text columns, and the fenced writes' shared steps."""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from service.jobs import AttemptOutcome, JobStatus, Lease
from service.store.base import Clock
from service.store.rows import Readers, job_status
from service.store.sqlite.errors import translate_errors
from service.store.sqlite.statements import CLOSE_ATTEMPT, GIVE_BACK, NOW
from service.store.sqlite.timestamps import from_text, to_text


class Connected:
    """One connection under a lock, and the ways to use it, which every area of the store
    (each a base class of SqliteStore) calls; SqliteStore.__init__ sets what it holds."""

    database_url: str
    path: str
    max_result_bytes: int
    max_payload_bytes: int
    _clock: Clock | None
    _lock: threading.Lock
    _conn: sqlite3.Connection

    @contextmanager
    def _write(self) -> Iterator[tuple[sqlite3.Connection, str]]:
        """A write transaction holding the file's write lock, and the instant it began."""
        with self._lock, translate_errors():
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn, self._now()
                self._conn.execute("COMMIT")
            except BaseException:
                # A failed COMMIT (a deferred constraint, a full disk) may leave the transaction
                # open, and then no later write could begin on the store's one connection.
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    @contextmanager
    def _read(self) -> Iterator[tuple[sqlite3.Connection, str]]:
        with self._lock, translate_errors():
            yield self._conn, self._now()

    def _now(self) -> str:
        if self._clock is not None:
            return to_text(self._clock())
        return str(self._conn.execute(NOW).fetchone()["now"])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


# SQLite holds times, ids, name lists and JSON as text.
READ = Readers(time=from_text, ident=uuid.UUID, names=lambda text: tuple(json.loads(text)), json=json.loads)


def fence(lease: Lease) -> dict[str, Any]:
    return {"job_id": str(lease.job_id), "claim": lease.claim, "attempt": lease.attempt, "owner": lease.owner}


def close_attempt(
    conn: sqlite3.Connection, lease: Lease, now: str, outcome: AttemptOutcome, error: str | None = None
) -> None:
    """The attempt's row closed with its outcome, in the transaction that ends the run."""
    conn.execute(CLOSE_ATTEMPT, {**fence(lease), "now": now, "outcome": outcome.value, "error": error})
    conn.execute(GIVE_BACK, {"job_id": str(lease.job_id)})  # the run ended: its slots come back now


def status(row: Mapping[str, Any]) -> JobStatus:  # a sqlite3.Row reads as one
    return job_status(row, READ)
