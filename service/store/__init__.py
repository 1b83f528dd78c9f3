"""The one seam to the database. ``open_store`` picks the store from the URL."""

from __future__ import annotations

from service.config import Settings
from service.errors import InvalidInput
from service.store.base import Clock, Store


def open_store(settings: Settings, *, clock: Clock | None = None) -> Store:
    """A PostgreSQL store for ``postgresql://`` URLs, a SQLite store for ``sqlite:///path``."""
    url = settings.database_url
    if url.startswith(("postgresql://", "postgres://")):
        from service.store.postgres import PostgresStore

        return PostgresStore(
            url,
            pool_size=settings.pool_size,
            notify=settings.notify,
            prepare=settings.prepare,
            clock=clock,
            max_result_bytes=settings.max_result_bytes,
        )
    if url.startswith("sqlite:///"):
        from service.store.sqlite import SqliteStore

        return SqliteStore(url, clock=clock, max_result_bytes=settings.max_result_bytes)
    raise InvalidInput(f"JOBQ_DATABASE_URL must start with postgresql:// or sqlite:///, not {url.split(':')[0]!r}")


__all__ = ["Store", "open_store"]
