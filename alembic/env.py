"""Alembic environment: the URL comes from Settings, the target is the one MetaData."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from service.config import load_settings
from service.store.migrate import record_compatibility, sqlalchemy_url
from service.store.schema import metadata

config = context.config
url = config.attributes.get("database_url") or load_settings().database_url


def run_migrations_offline() -> None:
    context.configure(url=sqlalchemy_url(url), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    # `jobq migrate` passes its own connection: it holds the migrate lock and its lock_timeout
    # (service/store/migrate.py). `alembic` by hand and the drift check get one of their own.
    given: Connection | None = config.attributes.get("connection")
    if given is not None:
        run_migrations_on(given)
        return
    engine = create_engine(sqlalchemy_url(url), poolclass=pool.NullPool)
    with engine.connect() as connection:
        run_migrations_on(connection)
    engine.dispose()


def run_migrations_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        # One transaction per revision: a step that gave up on a lock rolls back its revision only,
        # and a retry resumes from there.
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()
    # The releases this schema now serves (migration 0011's table), from the revisions' markers: a
    # rolled-back release reads them to know whether it may run on a schema ahead of it.
    record_compatibility(connection, context.script)
    connection.commit()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
