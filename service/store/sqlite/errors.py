"""The one place where sqlite3's errors become jobq's (service.errors)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from service.errors import InvalidInput, StoreUnavailable


@contextmanager
def translate_errors() -> Iterator[None]:
    """The one place where sqlite3's errors become jobq's."""
    try:
        yield
    except sqlite3.IntegrityError as exc:
        raise InvalidInput(f"rejected by the schema: {exc}") from exc
    except sqlite3.OperationalError as exc:
        if "unable to open database file" in str(exc) or "no such table" in str(exc):
            raise StoreUnavailable(f"no migrated SQLite database here (run jobq migrate): {exc}") from exc
        raise StoreUnavailable(f"SQLite unavailable: {exc}") from exc
