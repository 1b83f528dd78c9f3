"""The caller's own connection, for an enqueue inside the caller's transaction.

``Queue.enqueue(..., connection=conn)`` hands the store whatever the application
holds: a psycopg connection, or a SQLAlchemy ``Connection`` or ``Session`` on the
psycopg driver (``postgresql+psycopg://``); ``AsyncQueue``'s, their async kin (psycopg's
``AsyncConnection``, SQLAlchemy's ``AsyncConnection`` or ``AsyncSession``). This is the one
place that knows how to find the psycopg connection underneath, so nothing above the store
imports a driver. The store then runs its statements on it without committing: the job
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
    if isinstance(connection, psycopg.AsyncConnection) or _is_sqlalchemy_async(connection):
        raise InvalidInput(
            "Queue's connection= takes a synchronous connection; an async one (psycopg's AsyncConnection, "
            "SQLAlchemy's AsyncConnection or AsyncSession) goes to AsyncQueue"
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


async def async_caller_connection(connection: object) -> psycopg.AsyncConnection[Any]:
    """The psycopg AsyncConnection behind ``connection`` (AsyncQueue); InvalidInput for anything else."""
    if isinstance(connection, psycopg.AsyncConnection):
        return connection
    if isinstance(connection, psycopg.Connection) or _is_sqlalchemy_sync(connection):
        raise InvalidInput(
            "AsyncQueue's connection= takes an async connection (psycopg's AsyncConnection, SQLAlchemy's "
            "AsyncConnection or AsyncSession); a synchronous one goes to Queue"
        )
    driver = await _sqlalchemy_async_driver_connection(connection) if _is_sqlalchemy_async(connection) else None
    if isinstance(driver, psycopg.AsyncConnection):
        return driver
    name = type(driver if driver is not None else connection).__name__
    raise InvalidInput(
        "connection= takes a psycopg AsyncConnection or a SQLAlchemy AsyncConnection/AsyncSession on the "
        f"psycopg driver (postgresql+psycopg://), not a {name}"
    )


async def _sqlalchemy_async_driver_connection(connection: object) -> object | None:
    """The driver connection of a SQLAlchemy AsyncConnection or AsyncSession: as the sync ones
    (:func:`_sqlalchemy_driver_connection`), a session's transaction's connection, and a
    connection not in a transaction begins one."""
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(connection, AsyncSession):
        connection = await connection.connection()
    if not isinstance(connection, AsyncConnection):
        return None
    if not connection.in_transaction():
        await connection.begin()
    return (await connection.get_raw_connection()).driver_connection


def _is_sqlalchemy_async(connection: object) -> bool:
    """A SQLAlchemy AsyncConnection or AsyncSession (or a subclass), told without importing
    SQLAlchemy's asyncio extension for any other object: it needs greenlet, which an
    application without async SQLAlchemy may not have installed."""
    return any(kind.__module__.startswith("sqlalchemy.ext.asyncio") for kind in type(connection).__mro__)


def _is_sqlalchemy_sync(connection: object) -> bool:
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    return isinstance(connection, Connection | Session)
