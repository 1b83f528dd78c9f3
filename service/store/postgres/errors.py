"""The one place where psycopg's errors become jobq's (service.errors)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import errors as pgerrors

from service.errors import InvalidInput, StoreUnavailable

RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock


class Retryable(Exception):
    """A deadlock or serialization failure: the statement may simply run again."""


class ConnectionLost(StoreUnavailable):
    """The connection broke under a statement (the server restarted, crashed or went away). Still a
    StoreUnavailable to every caller; the store itself may run a replay-safe operation once more on
    a fresh connection (``Connected._retrying``)."""


# No SQLSTATE (the socket closed under psycopg), a connection exception (08…), or the server
# ending the session: admin_shutdown, crash_shutdown, cannot_connect_now (57P01–57P03).
_CONNECTION_GONE = ("08", "57P01", "57P02", "57P03")


def connection_lost(exc: psycopg.Error) -> bool:
    sqlstate = getattr(exc, "sqlstate", None)
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and (
        sqlstate is None or sqlstate.startswith(_CONNECTION_GONE)
    )


class LockWaitTooLong(Exception):
    """A statement waited past its transaction's lock_timeout (set only where the store
    has a cheaper way on than waiting: see ``complete_and_claim``)."""


def pipeline_cause(exc: psycopg.Error) -> psycopg.Error:
    """The error behind psycopg's "cannot exit pipeline mode" (issue 26).

    An error that is the answer to a pipeline's Sync rather than to one of its statements,
    that is an error of the COMMIT the Sync runs (a lock wait there that timed out, a full
    NOTIFY queue), gives the Sync two results, the error and then its ReadyForQuery. psycopg
    expects one: it takes the error for the Sync, raises it from Pipeline.__exit__ and stops
    reading, and then psycopg's exit_pipeline_mode, run in a ``finally``, finds libpq still
    holding the ReadyForQuery and raises "cannot exit pipeline mode while busy" in place of
    the error (which it leaves as the context). The refill's commit no longer meets its lock
    timeout (REFILL_LOCK_TIMEOUT_END); for whatever else a commit may raise, this translates
    the commit's own error, not an outage, and ``Connected._connection`` closes the
    connection, which psycopg left in pipeline mode."""
    cause = exc.__context__
    if (
        isinstance(exc, psycopg.OperationalError)
        and str(exc).startswith("cannot exit pipeline mode")
        and isinstance(cause, psycopg.Error)
    ):
        return cause
    return exc


@contextmanager
def translate_errors() -> Iterator[None]:
    """The one place where psycopg's errors become jobq's."""
    try:
        yield
    except psycopg.Error as raised:
        exc = pipeline_cause(raised)
        sqlstate = getattr(exc, "sqlstate", None)
        if sqlstate in RETRYABLE_SQLSTATES:
            raise Retryable(str(exc)) from exc
        if isinstance(exc, pgerrors.LockNotAvailable):
            raise LockWaitTooLong(str(exc)) from exc
        if isinstance(exc, pgerrors.UndefinedTable):
            raise StoreUnavailable(f"the database schema is not migrated (run jobq migrate): {exc}") from exc
        if isinstance(exc, pgerrors.CheckViolation):
            constraint = exc.diag.constraint_name or "a check constraint"
            raise InvalidInput(f"rejected by {constraint}") from exc
        if isinstance(exc, pgerrors.DataError | pgerrors.IntegrityError):
            raise InvalidInput(str(exc).splitlines()[0]) from exc
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            lost = ConnectionLost if connection_lost(exc) else StoreUnavailable
            raise lost(f"PostgreSQL unavailable: {first_line}") from exc
        raise
