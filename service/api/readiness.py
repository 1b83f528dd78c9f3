"""Readiness (``GET /readyz``): the database answers and its schema is one this release runs on.

The schema is read through Alembic with a database session of its own. Probed every few
seconds by every API pod, that was a new PostgreSQL session per probe (a fork of a backend
each). So the database is asked through the app's pool (one statement), and the schema is
read again only every SCHEMA_RECHECK_SECONDS once it was found usable; a schema found
unusable (behind, or ahead and not compatible) is read at every probe, so the pod turns
ready as soon as ``jobq migrate`` has run.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable

from service.store import Store

SCHEMA_RECHECK_SECONDS = 30.0
"""How long a usable schema is taken as read: a migration that makes it unusable for this
release (ahead and not compatible) turns the pod unready within this."""


class Readiness:
    """One database's readiness as this process last found it."""

    def __init__(self, database_url: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.database_url = database_url
        self.clock = clock
        self._lock = threading.Lock()
        self._usable_until = 0.0

    def check(self, store: Store) -> None:
        """Return when ready; raise StoreUnavailable (the database does not answer) or the schema's
        mismatch problem (a 503 that says behind or ahead, and what to do)."""
        from service.store import migrate  # SQLAlchemy and Alembic: loaded only when asked

        store.database_now()  # one statement on the pool: the database answers
        started = self.clock()
        with self._lock:
            if started < self._usable_until:
                return
        status = migrate.schema_status(self.database_url)
        if not status.usable:
            raise status.mismatch()
        with self._lock:
            self._usable_until = started + SCHEMA_RECHECK_SECONDS


@functools.cache
def readiness(database_url: str) -> Readiness:
    """The process's one Readiness for a database."""
    return Readiness(database_url)
