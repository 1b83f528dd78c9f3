"""Before a worker claims: a database that answers, with its schema at the newest migration.

A database may come up after its workers (a fleet restarted together, a
container scheduled first), so a worker waits for it rather than exit. But a
worker that waits in silence looks hung: :func:`wait_for_database` says at once
what is wrong and what to do, then again every ``report_seconds`` (30 s by
default) while it lasts. With a deadline (``jobq worker --wait-for-database
SECONDS``) it gives up, for orchestrators that restart what exits.

A schema behind this jobq (``jobq migrate`` not yet run after an upgrade) is
waited out the same way: the worker would otherwise fail its first claim with an
unknown column. So is a schema ahead of it (a rollback after a newer release
migrated) unless its newer migrations are marked compatible with this release
(:class:`service.store.migrate.SchemaStatus`), in which case the worker starts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from service.errors import SchemaMismatch, StoreUnavailable
from service.store.base import Store
from service.worker.backoff import Backoff
from service.worker.logs import log_event

REPORT_SECONDS = 30.0

UNREACHABLE_ADVICE = "check JOBQ_DATABASE_URL and that the database server is up; the worker keeps trying"
BEHIND_ADVICE = "run `jobq migrate` (once, from one place); the worker starts as soon as the schema is current"
AHEAD_ADVICE = (
    "a newer release of jobq changed this schema in ways this release cannot run on: deploy that release, "
    "or restore the database from before its migration; the worker keeps waiting"
)


class DatabaseNotReady(StoreUnavailable):
    """The database still did not answer, or its schema was still not one this release runs on, at the deadline."""


def wait_for_database(
    open_store: Callable[[], Store],
    database_url: str,
    *,
    wait_seconds: float | None = None,
    report_seconds: float = REPORT_SECONDS,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Store | None:
    """The store (opened with ``open_store``) once the database answers and its schema is current;
    None if ``stop`` was set first. Raises :class:`DatabaseNotReady` after ``wait_seconds``
    (None: wait for ever). Reads only: waiting never creates or changes anything."""
    stop = stop or threading.Event()
    started = clock()
    backoff = Backoff(cap=min(10.0, report_seconds))
    next_report = started  # the first problem is reported at once
    store: Store | None = None
    problem: str | None
    try:
        while not stop.is_set():
            try:
                store = store or open_store()  # a SQLite file that is not there fails here
            except StoreUnavailable as exc:
                problem, advice = _problem(exc)
            else:
                problem, advice = _check(database_url)  # the store opened: a SQLite file is there
            if problem is None:
                if next_report > started:  # something was reported: say it is over
                    log_event("worker.database_ready", waited_s=round(clock() - started, 1))
                ready, store = store, None
                return ready
            now = clock()
            waited = now - started
            if now >= next_report:  # the first time, then every report_seconds
                log_event(
                    "worker.waiting_for_database",
                    logging.WARNING,
                    waited_s=round(waited, 1),
                    error=problem,
                    todo=advice,
                )
                next_report = now + report_seconds
            if wait_seconds is not None and waited >= wait_seconds:
                log_event("worker.gave_up", logging.ERROR, waited_s=round(waited, 1), error=problem, todo=advice)
                raise DatabaseNotReady(f"gave up after --wait-for-database {wait_seconds:g} s: {problem}")
            pause = min(backoff.next(), next_report - now)
            if wait_seconds is not None:
                pause = min(pause, started + wait_seconds - now)
            stop.wait(max(pause, 0.01))
        return None
    finally:
        if store is not None:  # not handed over
            store.close()


def _check(database_url: str) -> tuple[str | None, str]:
    """(None, "") when ready; else what is wrong and what to do. The schema's version is read on a
    connection of its own, which fails at once when refused (the store's pool waits its timeout)."""
    from service.store import migrate  # Alembic: loaded by the worker only, once

    try:
        status = migrate.schema_status(database_url)
    except StoreUnavailable as exc:  # the database did not answer
        return _first_line(exc), UNREACHABLE_ADVICE
    if status.state == "ahead, compatible":
        log_event("worker.schema_ahead_compatible", logging.WARNING, schema=status.describe())
    if status.usable:
        return None, ""
    return status.describe(), BEHIND_ADVICE if status.state == "behind" else AHEAD_ADVICE


def _problem(exc: StoreUnavailable) -> tuple[str, str]:
    if isinstance(exc, SchemaMismatch):
        return _first_line(exc), AHEAD_ADVICE if exc.direction == "ahead" else BEHIND_ADVICE
    return _first_line(exc), BEHIND_ADVICE if "jobq migrate" in str(exc) else UNREACHABLE_ADVICE


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
