"""The SQLite store: one host, many processes sharing one file, BEGIN IMMEDIATE claims, polling."""

from service.store.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
