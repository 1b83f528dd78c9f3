"""The one seam to the database. ``open_store`` picks the store from the URL."""

from __future__ import annotations

from service.config import Settings
from service.store.base import Clock, Store
from service.store.urls import database_dialect


def open_store(settings: Settings, *, clock: Clock | None = None) -> Store:
    """A PostgreSQL store for ``postgresql://`` URLs, a SQLite store for ``sqlite:///path``."""
    url = settings.database_url
    if database_dialect(url) == "postgres":
        from service.store.postgres import PostgresStore

        return PostgresStore(
            url,
            pool_size=settings.pool_size,
            notify=settings.notify,
            prepare=settings.prepare,
            clock=clock,
            max_result_bytes=settings.max_result_bytes,
            max_payload_bytes=settings.max_body_bytes,
        )
    from service.store.sqlite import SqliteStore

    return SqliteStore(
        url, clock=clock, max_result_bytes=settings.max_result_bytes, max_payload_bytes=settings.max_body_bytes
    )


__all__ = ["Store", "open_store"]
