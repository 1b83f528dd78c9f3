"""The caller's own connection, for an enqueue inside the caller's transaction.

``Queue.enqueue(..., connection=conn)`` hands the store whatever the application
holds: a psycopg connection, or a SQLAlchemy ``Connection`` or ``Session`` on the
psycopg driver (``postgresql+psycopg://``). This is the one place that knows how
to find the psycopg connection underneath, so nothing above the store imports a
driver. The store then runs its statements on it without committing: the job
exists only if the caller commits, and the NOTIFY that wakes the workers is sent
by PostgreSQL at that commit (never on a rollback).
"""

from __future__ import annotations

from typing import Any

import psycopg

from service.errors import InvalidInput


def caller_connection(connection: object) -> psycopg.Connection[Any]:
    """The psycopg connection behind ``connection``; InvalidInput for anything else."""
    if isinstance(connection, psycopg.Connection):
        return connection
    if isinstance(connection, psycopg.AsyncConnection):
        raise InvalidInput(
            "connection= takes a synchronous psycopg connection; an AsyncConnection cannot run "
            "in this call (enqueue with a sync connection, or through the REST API from asyncio)"
        )
    driver = _sqlalchemy_driver_connection(connection)
    if isinstance(driver, psycopg.Connection):
        return driver
    name = type(driver if driver is not None else connection).__name__
    raise InvalidInput(
        "connection= takes a psycopg connection or a SQLAlchemy Connection/Session on the "
        f"psycopg driver (postgresql+psycopg://), not a {name}"
    )


def _sqlalchemy_driver_connection(connection: object) -> object | None:
    """The DB-API connection of a SQLAlchemy Connection or Session (None: neither).

    A Session's ``connection()`` is the Connection of its current transaction
    (beginning one if needed), so the insert joins what the caller's ``commit()`` commits.
    """
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    if isinstance(connection, Session):
        connection = connection.connection()
    if isinstance(connection, Connection):
        if not connection.in_transaction():
            # What the caller's own execute would do (autobegin); else its commit() would
            # have no transaction to commit, and the insert would be rolled back with the pool's reset.
            connection.begin()
        return connection.connection.driver_connection
    return None
