"""Alembic environment: the URL comes from Settings, the target is the one MetaData."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from service.config import load_settings
from service.store.migrate import sqlalchemy_url
from service.store.schema import metadata

config = context.config
url = config.attributes.get("database_url") or load_settings().database_url


def run_migrations_offline() -> None:
    context.configure(url=sqlalchemy_url(url), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(sqlalchemy_url(url), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
