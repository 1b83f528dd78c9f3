"""Which database a ``JOBQ_DATABASE_URL`` names: the one parser every command uses.

``open_store`` (the API, the worker, the CLI, ``Queue``) and ``jobq migrate`` ask here, so
a URL one of them refuses, all refuse alike, with the same one-line message (InvalidInput:
the CLI's exit 2).
"""

from __future__ import annotations

from typing import Literal

from service.errors import InvalidInput

Dialect = Literal["postgres", "sqlite"]

POSTGRES_PREFIXES = ("postgresql://", "postgres://")
SQLITE_PREFIX = "sqlite:///"
WHAT = "the database URL (JOBQ_DATABASE_URL or --database-url)"


def database_dialect(url: str) -> Dialect:
    """``postgres`` for ``postgresql://…`` (or ``postgres://…``), ``sqlite`` for ``sqlite:///path``;
    InvalidInput naming what to set for anything else (an empty URL, another driver, a typo)."""
    if not url.strip():
        raise InvalidInput(
            f"{WHAT} is empty: set it to postgresql://user@host:port/db or sqlite:///path/to/jobq.db "
            "(or unset it for the default, sqlite:///./jobq.db)"
        )
    if url.startswith(POSTGRES_PREFIXES):
        return "postgres"
    if url.startswith(SQLITE_PREFIX):
        if len(url) > len(SQLITE_PREFIX):
            return "sqlite"
        raise InvalidInput(f"{WHAT} sqlite:/// names no file: write sqlite:///path/to/jobq.db")
    scheme = url.split("://", 1)[0] if "://" in url else url[:40]
    hint = " (jobq picks the driver itself: write postgresql://...)" if "+" in scheme else ""
    raise InvalidInput(f"{WHAT} must start with postgresql:// or sqlite:///, not {scheme!r}{hint}")
