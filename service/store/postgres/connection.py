"""The PostgreSQL store's plumbing, which every area of it builds on: how a connection is
made (and made through a pooler), the pool, the parameters every statement takes (the clock,
the notify switch), retries of deadlocks and serialization failures, prepared statements and
the poolers that lose them, and the readers of psycopg's typed rows.

Behind a transaction pooler (PgBouncer in transaction mode) each transaction may run on
another server connection, shared with other clients. Two things a direct connection may
do then break, and this module keeps both off the pooler's way:

- **Startup options.** Every connection asks for ``options=-c jit=off`` (see
  :func:`connection_defaults`); PgBouncer refuses the ``options`` startup parameter (before
  1.20 always, after unless configured), so :class:`JobqConnection` connects again without it.
  The claim, the one statement JIT was measured to hurt, turns JIT off in its own
  transaction (``CLAIM_PLANNER``), so it does not depend on the option.
- **Named prepared statements.** psycopg prepares a statement on a connection once it has
  run it five times there, as ``_pg3_0``, ``_pg3_1``…; through a pooler that does not track
  them (PgBouncer before 1.21, or ``max_prepared_statements = 0``) those names meet other
  clients' on the shared server connections: "prepared statement "_pg3_1" already exists",
  then "bind message supplies 0 parameters, but prepared statement "_pg3_1" requires 2" on
  every call. ``JOBQ_PREPARE`` (:class:`Preparation`) says whether to prepare: ``off`` never,
  ``on`` as psycopg does, ``auto`` as psycopg does until the first such error, then never
  again in this store (the error is retried, and logged once with what to set).

After a server restart every idle pooled connection is dead: the old server said goodbye
(FATAL 57P01) and hung up while it sat in the pool. Two defences, so that no request answers 503
once the new server is up:

- **Checked out alive** (:func:`hung_up`, at every checkout in ``Connected._connection``): a
  connection whose socket already has something to read while idle (the goodbye, or EOF) is
  closed (the pool makes a new one) and another taken, before any statement is sent. No round
  trip: one ``select`` with no wait. (psycopg_pool's own ``check`` hook would put such a
  connection back, psycopg not knowing it closed, and back off a second per try.)
- **Replayed once** (``Connected._retrying(replay=True)``): a connection that breaks under a
  statement anyway (the restart came between the check and the statement) fails with
  ConnectionLost; reads, and writes whose second run is settled by an idempotency key, run once
  more on a fresh connection. Other writes are not replayed: their outcome is unknown, and the
  caller's own rule settles it (a worker's finish re-reads its attempt's receipt, by its fence).
"""

from __future__ import annotations

import logging
import random
import re
import select
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal, Self, TypeVar, cast

import psycopg
from psycopg import errors as pgerrors
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import ExecStatus
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import ConnectionPool, PoolTimeout

from service.errors import StoreUnavailable
from service.jobs import JobStatus, Lease
from service.logs import FIELDS_ATTR
from service.store.base import Clock
from service.store.postgres.errors import ConnectionLost, Retryable, translate_errors
from service.store.rows import Readers, job_status

_RETRIES = 5
T = TypeVar("T")
PrepareMode = Literal["on", "off", "auto"]
PREPARE_THRESHOLD = 5
"""psycopg's own: a statement is prepared on its fifth run on a connection."""

log = logging.getLogger("jobq.store")


def connection_defaults(database_url: str) -> dict[str, Any]:
    """TCP settings that notice a dead link in seconds, not the kernel's ~15 minutes, and no JIT.

    Without them a statement sent into a cut network hangs until TCP gives up,
    and the worker cannot even learn that its lease is gone. Values in the URL win.

    JIT off: the fair claim's estimated cost over a deep queue passes jit_above_cost,
    and compiling its expressions took ~230 ms per claim (1 M queued rows) for a
    statement that runs in ~2 ms. Every jobq statement is short; none gains from JIT.
    A pooler that refuses the option gets a connection without it (:class:`JobqConnection`).
    """
    defaults: dict[str, Any] = {
        "connect_timeout": 10,
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": 30_000,  # milliseconds unacknowledged data may wait
        "options": "-c jit=off",
    }
    given = conninfo_to_dict(database_url)
    return {key: value for key, value in defaults.items() if key not in given}


# PgBouncer before 1.20: "unsupported startup parameter: options"; 1.20 and later parse the
# option and refuse a setting they do not track: "unsupported options startup parameter ...".
_REFUSED_OPTIONS = re.compile(r"unsupported (options )?startup parameter")


class JobqConnection(psycopg.Connection[Any]):
    """psycopg's connection, made again without the ``options`` startup parameter when the
    server refuses it (a pooler: see the module docstring). The refusal comes at once, from
    the pooler itself, so the second attempt costs a local round trip, once per connection."""

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
        try:
            return super().connect(conninfo, **kwargs)
        except psycopg.OperationalError as exc:
            if "options" not in kwargs or not _REFUSED_OPTIONS.search(str(exc)):
                raise
        kwargs.pop("options")
        return super().connect(conninfo, **kwargs)


def lost_prepared_statement(exc: psycopg.Error) -> bool:
    """A pooler mixed up named prepared statements: one of ours was prepared on another server
    connection, or its name was taken there by another client's (see the module docstring)."""
    if isinstance(exc, pgerrors.DuplicatePreparedStatement | pgerrors.InvalidSqlStatementName):
        return True
    # Bind against another client's statement of the same name: "bind message supplies 0
    # parameters, but prepared statement "_pg3_1" requires 2", or "... has 2 result formats ...".
    return isinstance(exc, pgerrors.ProtocolViolation) and str(exc).startswith("bind message")


class Preparation:
    """Whether the store's connections prepare statements (``JOBQ_PREPARE``), and the switch
    ``auto`` throws when it finds a pooler, or a pooler's error.

    Prepared, the claim costs PostgreSQL about a third of the CPU it costs unprepared
    (planned at every run; README, "Behind PgBouncer"), so a direct connection prepares.
    ``auto`` looks for a pooler when a connection is made: a pooler hands the client a
    backend key of its own (it must route cancel requests itself), so the pid the client
    was given is not the pid of the backend that answers. A pooler that keeps prepared
    statements (PgBouncer 1.21+ with ``max_prepared_statements``) is found too: ``on`` keeps
    preparing there. The first prepared-statement error is the safety net for what that
    look misses.
    """

    def __init__(self, mode: PrepareMode) -> None:
        self.mode = mode
        self._lock = threading.Lock()
        self._preparing = mode != "off"

    @property
    def threshold(self) -> int | None:
        """psycopg's ``prepare_threshold``: None never prepares."""
        return PREPARE_THRESHOLD if self._preparing else None

    def configure(self, conn: psycopg.Connection[Any]) -> None:
        """The pool's hook for each new connection, before it is used."""
        if self.mode == "auto" and self._preparing:
            with conn.cursor(row_factory=tuple_row) as cursor:
                row = cursor.execute("SELECT pg_backend_pid()").fetchone()
            if row is not None and row[0] != conn.info.backend_pid:
                self._stop(logging.INFO, "a pooler answers for PostgreSQL (its backend key is not the backend's)")
        conn.prepare_threshold = self.threshold

    def lost(self, exc: psycopg.Error) -> None:
        """A prepared statement was lost (:func:`lost_prepared_statement`). ``auto``: stop
        preparing, say so once, and raise Retryable (the statement failed before it ran, in a
        transaction that was rolled back whole). Otherwise StoreUnavailable, naming the fix."""
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if self.mode != "auto":
            raise StoreUnavailable(
                f"{first_line}: a transaction pooler loses psycopg's prepared statements; "
                "set JOBQ_PREPARE=off (or auto), or use PgBouncer 1.21+ with max_prepared_statements > 0"
            ) from exc
        self._stop(logging.WARNING, first_line)
        raise Retryable(first_line) from exc

    def _stop(self, level: int, why: str) -> None:
        with self._lock:
            was_preparing, self._preparing = self._preparing, False
        if was_preparing:
            advice = (
                "this process prepares no statement from now on (each is planned at every run); "
                "JOBQ_PREPARE=off starts that way, JOBQ_PREPARE=on keeps preparing behind a pooler "
                "that keeps prepared statements (PgBouncer 1.21+ with max_prepared_statements > 0)"
            )
            log.log(level, "store.prepare_off", extra={FIELDS_ATTR: {"why": why, "advice": advice}})


def hung_up(conn: psycopg.Connection[Any]) -> bool:
    """Did the server close this idle pooled connection? An idle autocommit connection that LISTENs
    nowhere has nothing to read unless the server said goodbye (FATAL 57P01 at a restart) or hung
    up (EOF); a readable socket is taken for that (a rare harmless message only costs a new
    connection). No round trip, unlike psycopg_pool's check_connection."""
    if conn.closed or conn.broken:
        return True
    readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    return bool(readable)


RECONNECT_SECONDS = 2.0
"""How long the pool keeps retrying a connection it failed to make before it gives up and waits
for the next caller to ask again. psycopg_pool's default (5 min, doubling waits from 1 s) left a
pool that lost its server for a minute still waiting up to a minute more after the server came
back; given up, the next caller's need starts a fresh attempt at once."""


def open_pool(database_url: str, size: int, preparation: Preparation, timeout: float) -> ConnectionPool[Any]:
    """The store's pool: at most ``size`` autocommit connections, one kept open while idle (each
    checked at checkout for a server that hung up on it: :func:`hung_up`)."""
    return ConnectionPool(
        database_url,
        min_size=1,
        max_size=size,
        connection_class=JobqConnection,
        kwargs={"autocommit": True, "row_factory": dict_row, **connection_defaults(database_url)},
        configure=preparation.configure,
        timeout=timeout,
        reconnect_timeout=RECONNECT_SECONDS,
        open=True,
        name="jobq",
    )


class Connected:
    """A pool and the ways to run a statement on it, which every area of the store (each
    a base class of PostgresStore) calls; PostgresStore.__init__ sets what it holds."""

    database_url: str
    notify: bool
    max_result_bytes: int
    max_payload_bytes: int
    _clock: Clock | None
    _pool: ConnectionPool[Any]
    _preparation: Preparation
    _unreachable: str | None
    """Why the server could not be reached the last time this store tried (None: it could;
    a new store has not tried yet)."""

    def _params(self, **values: Any) -> dict[str, Any]:
        values["now"] = self._clock() if self._clock else None
        values["notify"] = self.notify
        return values

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        with translate_errors():
            try:
                with self._live_connection() as conn:
                    threshold = self._preparation.threshold
                    if conn.prepare_threshold != threshold:  # made before `auto` stopped preparing
                        conn.prepare_threshold = threshold
                    try:
                        # The pool's connections are made with row_factory=dict_row (open_pool).
                        yield cast("psycopg.Connection[dict[str, Any]]", conn)
                    except psycopg.Error as exc:
                        if conn.pgconn.pipeline_status:
                            # psycopg could not leave pipeline mode (errors.pipeline_cause): results
                            # are still pending on it, so it cannot serve another statement.
                            conn.close()
                        if not lost_prepared_statement(exc):
                            raise
                        conn.close()  # its psycopg knows names the server may not: the pool makes another
                        self._preparation.lost(exc)
            except PoolTimeout as exc:
                self._probe()  # the pool only says it timed out: unreachable says why
                raise StoreUnavailable("no PostgreSQL connection: every pooled connection is busy") from exc

    @contextmanager
    def _live_connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection the server has not hung up on (:func:`hung_up`): dead ones (all of
        them, after a server restart) are closed, so the pool replaces them, and another is taken.

        Waiting on the pool for a connection it cannot make costs the pool's whole timeout (10 s)
        before StoreUnavailable: every claim, renewal and API request of an outage took that long
        to fail. So before the store's first call, while the server is known unreachable, and
        after it hung up on a pooled connection, one direct attempt (:meth:`_probe`) comes first
        and fails at once."""
        if self._unreachable is not None:
            self._probe()
        for _ in range(self._pool.max_size):
            with self._pool.connection() as conn:
                if not hung_up(conn):
                    yield conn
                    return
                conn.close()  # closed: the pool makes a new one instead of keeping it
            self._probe()  # is there a server to make that new one?
        with self._pool.connection() as conn:  # every one was dead: this one is new
            yield conn

    def _probe(self) -> None:
        """One direct connection attempt: StoreUnavailable, naming why (refused, no such
        database…), when the server cannot be reached; otherwise nothing, and it is marked up."""
        try:
            with JobqConnection.connect(self.database_url, **connection_defaults(self.database_url)):
                pass
        except psycopg.Error as exc:
            self._unreachable = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreUnavailable(f"no PostgreSQL connection: {self._unreachable}") from exc
        self._unreachable = None

    def _retrying(self, operation: Callable[[], T], *, replay: bool = False) -> T:
        """Retry deadlocks and serialization failures with jitter. ``replay``: the operation may run
        twice with one effect (a read; a write an idempotency key settles), so a connection that broke
        under it (ConnectionLost: a server restart) is replaced and the operation run once more."""
        replayed = False
        for tries in range(_RETRIES):
            try:
                return operation()
            except ConnectionLost as exc:
                if not replay or replayed:
                    raise
                replayed = True
                log.info("store.replayed", extra={FIELDS_ATTR: {"why": str(exc)}})
            except Retryable as exc:
                if tries == _RETRIES - 1:
                    raise StoreUnavailable(f"gave up after {_RETRIES} tries: {exc}") from exc
                time.sleep(random.uniform(0, 0.01 * 2**tries))
        raise AssertionError("unreachable")

    def _fetchall(self, statement: str, params: Mapping[str, Any], *, replay: bool = False) -> list[dict[str, Any]]:
        """``replay``: safe to run twice (see :meth:`_retrying`); the reads say so."""

        def run() -> list[dict[str, Any]]:
            with self._connection() as conn:
                cursor = conn.execute(statement, params)
                # Asked of the result's status: cursor.description builds a Column per column each time.
                result = cursor.pgresult
                return cursor.fetchall() if result is not None and result.status == ExecStatus.TUPLES_OK else []

        return self._retrying(run, replay=replay)

    def _fetchone(self, statement: str, params: Mapping[str, Any], *, replay: bool = False) -> dict[str, Any] | None:
        rows = self._fetchall(statement, params, replay=replay)
        return rows[0] if rows else None

    def close(self) -> None:
        self._pool.close()


def fence(lease: Lease) -> dict[str, Any]:
    return {"job_id": lease.job_id, "claim": lease.claim, "attempt": lease.attempt, "owner": lease.owner}


# psycopg returns times, ids, arrays and JSON typed already.
READ = Readers(time=lambda value: value, ident=lambda value: value, names=tuple, json=lambda value: value)


def status(row: Mapping[str, Any]) -> JobStatus:
    return job_status(row, READ)
