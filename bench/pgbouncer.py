"""A PgBouncer of the bench's own, in transaction mode, in front of one database: the tests'
runner (tests/pgbouncer.py, Debian's 1.18 as it ships: no ``max_prepared_statements``) as a
context manager, so the bench meets the pooler exactly as the tests do."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tests.pgbouncer import PgBouncer, pgbouncer_binary


def available() -> bool:
    return pgbouncer_binary() is not None


@contextlib.contextmanager
def pgbouncer(database_url: str, *, pool_size: int = 10, max_clients: int = 2000) -> Iterator[str]:
    """Yield a URL that reaches ``database_url`` through a fresh PgBouncer in transaction mode."""
    bouncer = PgBouncer.start(database_url, pool_size=pool_size, max_client_conn=max_clients)
    try:
        yield bouncer.url(database_url)
    finally:
        bouncer.close()
