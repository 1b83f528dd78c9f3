"""The PostgreSQL store's plumbing, which every area of it builds on: the pool, the
parameters every statement takes (the clock, the notify switch), retries of deadlocks
and serialization failures, and the readers of psycopg's typed rows."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import psycopg
from psycopg.pq import ExecStatus
from psycopg_pool import ConnectionPool, PoolTimeout

from service.errors import StoreUnavailable
from service.jobs import JobStatus, Lease
from service.store.base import Clock
from service.store.postgres.errors import Retryable, translate_errors
from service.store.postgres.listener import connection_defaults
from service.store.rows import Readers, job_status

_RETRIES = 5
T = TypeVar("T")


class Connected:
    """A pool and the ways to run a statement on it, which every area of the store (each
    a base class of PostgresStore) calls; PostgresStore.__init__ sets what it holds."""

    database_url: str
    notify: bool
    _clock: Clock | None
    _pool: ConnectionPool

    def _params(self, **values: Any) -> dict[str, Any]:
        values["now"] = self._clock() if self._clock else None
        values["notify"] = self.notify
        return values

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        with translate_errors():
            try:
                with self._pool.connection() as conn:
                    # The pool's connections are made with row_factory=dict_row (see __init__).
                    yield cast("psycopg.Connection[dict[str, Any]]", conn)
            except PoolTimeout as exc:
                raise StoreUnavailable(f"no PostgreSQL connection: {self._why_unreachable()}") from exc

    def _why_unreachable(self) -> str:
        """The pool only says it timed out; one direct attempt tells the reason (refused, no such database…)."""
        try:
            with psycopg.connect(self.database_url, **connection_defaults(self.database_url)):
                return "every pooled connection is busy"
        except psycopg.Error as exc:
            return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__

    def _retrying(self, operation: Callable[[], T]) -> T:
        """Retry deadlocks and serialization failures with jitter; nothing else."""
        for tries in range(_RETRIES):
            try:
                return operation()
            except Retryable as exc:
                if tries == _RETRIES - 1:
                    raise StoreUnavailable(f"gave up after {_RETRIES} tries: {exc}") from exc
                time.sleep(random.uniform(0, 0.01 * 2**tries))
        raise AssertionError("unreachable")

    def _fetchall(self, statement: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        def run() -> list[dict[str, Any]]:
            with self._connection() as conn:
                cursor = conn.execute(statement, params)
                # Asked of the result's status: cursor.description builds a Column per column each time.
                result = cursor.pgresult
                return cursor.fetchall() if result is not None and result.status == ExecStatus.TUPLES_OK else []

        return self._retrying(run)

    def _fetchone(self, statement: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        rows = self._fetchall(statement, params)
        return rows[0] if rows else None

    def close(self) -> None:
        self._pool.close()


def fence(lease: Lease) -> dict[str, Any]:
    return {"job_id": lease.job_id, "claim": lease.claim, "attempt": lease.attempt, "owner": lease.owner}


# psycopg returns times, ids, arrays and JSON typed already.
READ = Readers(time=lambda value: value, ident=lambda value: value, names=tuple, json=lambda value: value)


def status(row: Mapping[str, Any]) -> JobStatus:
    return job_status(row, READ)
