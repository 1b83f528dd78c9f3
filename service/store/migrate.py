"""Run the Alembic migrations from code (``jobq migrate``, tests, ``jobq dev``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy.exc
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool

from service.errors import StoreUnavailable

CONNECT_TIMEOUT_SECONDS = 10


def migrations_folder() -> Path:
    """The Alembic folder (env.py, script.py.mako, versions/).

    A checkout keeps it at the top level, beside alembic.ini, as Alembic lays it out;
    a wheel ships the same folder inside the package as ``service/alembic`` (see
    pyproject.toml), so ``jobq migrate`` works wherever jobq is installed.
    """
    package = Path(__file__).resolve().parents[1]
    for folder in (package / "alembic", package.parent / "alembic"):
        if (folder / "env.py").is_file():
            return folder
    raise StoreUnavailable(
        f"the Alembic migrations are missing: neither {package / 'alembic'} nor {package.parent / 'alembic'}"
    )


def sqlalchemy_url(database_url: str) -> str:
    """The SQLAlchemy spelling of a jobq URL: PostgreSQL goes through psycopg 3."""
    for prefix in ("postgresql://", "postgres://"):
        if database_url.startswith(prefix):
            return "postgresql+psycopg://" + database_url[len(prefix) :]
    return database_url


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_folder()))
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    with _translate():
        command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    with _translate():
        command.downgrade(alembic_config(database_url), revision)


@contextmanager
def _translate(failed: str = "cannot migrate") -> Iterator[None]:
    """SQLAlchemy's connection errors, as the store's own: StoreUnavailable."""
    try:
        yield
    except sqlalchemy.exc.DBAPIError as exc:
        first_line = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise StoreUnavailable(f"{failed}: {first_line}") from exc


def is_at_head(database_url: str) -> bool:
    """True when the database's schema is at the newest migration (readiness checks)."""
    heads = set(ScriptDirectory.from_config(alembic_config(database_url)).get_heads())
    url = sqlalchemy_url(database_url)
    # A host that drops packets would otherwise hold a readiness check or the worker's
    # start-up wait for the kernel's TCP timeout (minutes): give up as the listener does.
    connect_args = {"connect_timeout": CONNECT_TIMEOUT_SECONDS} if url.startswith("postgresql") else {}
    engine = create_engine(url, poolclass=pool.NullPool, connect_args=connect_args)
    try:
        with _translate("cannot read the schema version"), engine.connect() as connection:
            current = set(MigrationContext.configure(connection).get_current_heads())
    finally:
        engine.dispose()
    return current == heads
