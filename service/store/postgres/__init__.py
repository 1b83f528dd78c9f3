"""The PostgreSQL store: psycopg 3, a small pool, SKIP LOCKED claims, LISTEN/NOTIFY."""

from service.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
