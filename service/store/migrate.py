"""Run the Alembic migrations from code (``jobq migrate``, tests, ``jobq dev``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import sqlalchemy.exc
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, create_engine, delete, insert, inspect, pool, select, text

from service.errors import SchemaMismatch, StoreUnavailable
from service.store.schema import schema_compatibility
from service.store.urls import POSTGRES_PREFIXES, database_dialect

CONNECT_TIMEOUT_SECONDS = 10


# On PostgreSQL: give up on a silent host after CONNECT_TIMEOUT_SECONDS, and prepare nothing:
# psycopg prepares a statement on its fifth run on a connection (migrate reads alembic_version
# several times), and a transaction pooler that does not track prepared statements (PgBouncer
# before 1.21) then answers "prepared statement "_pg3_0" already exists".
def _postgres_connect_args() -> dict[str, object]:
    """Read at every connect, so a test may shorten CONNECT_TIMEOUT_SECONDS."""
    return {"connect_timeout": CONNECT_TIMEOUT_SECONDS, "prepare_threshold": None}


LOCK_TIMEOUT_SECONDS = 5.0
"""How long one migration step may wait for a table lock before it gives up and is retried."""
LOCK_RETRIES = 12
"""Retries of a step that gave up on a lock (with backoff: about two minutes in all) before migrate fails."""
REPORT_SECONDS = 5.0
"""At most one line per this many seconds while migrate waits (for the database, a lock, another migrate)."""
MIGRATE_LOCK_KEY = 0x6A6F6271_6D696772  # "jobqmigr": the advisory lock only `jobq migrate` takes
"""One migration at a time: the PostgreSQL session-level advisory lock every migrate holds while it runs."""
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE when lock_timeout ran out

COMPATIBLE_MARKER = "compatible_with_previous"
"""A revision's module-level flag: True when the previous release's statements stay valid on it."""

Report = Callable[[str], None]
SchemaState = Literal["current", "behind", "ahead", "ahead, compatible"]


@dataclass(frozen=True)
class SchemaStatus:
    """Where the database's schema stands against this release's migrations.

    - ``current``: at this release's newest revision.
    - ``behind``: at an older revision this release knows (or none): ``jobq migrate`` brings it up.
    - ``ahead, compatible``: at a revision this release does not know (a newer release migrated it),
      and the schema lists this release among those it serves: every newer revision was marked
      ``compatible_with_previous`` (expand-only), so this release runs on it: a rollback.
    - ``ahead``: newer and not marked compatible: this release must not run on it.
    """

    state: SchemaState
    database: str  # the database's revision(s), "none" before the first migration
    release: str  # this release's newest revision

    @property
    def usable(self) -> bool:
        return self.state in ("current", "ahead, compatible")

    def describe(self) -> str:
        """One line: where the schema stands, and what to do about it."""
        where = f"the database schema (revision {self.database}) is"
        if self.state == "current":
            return f"{where} at this release's newest migration"
        if self.state == "behind":
            return f"{where} behind this jobq (revision {self.release}): run `jobq migrate`"
        if self.state == "ahead, compatible":
            return (
                f"{where} ahead of this jobq (revision {self.release}); its newer migrations are marked "
                "compatible with this release, which runs on it unchanged"
            )
        return (
            f"{where} ahead of this jobq (revision {self.release}), and its newer migrations are not marked "
            "compatible with this release: deploy the release that migrated it, or restore the database "
            "from before that migration (deploy/README.md, Rollbacks)"
        )

    def mismatch(self) -> SchemaMismatch:
        return SchemaMismatch(self.describe(), "behind" if self.state == "behind" else "ahead")


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
    """The SQLAlchemy spelling of a jobq URL: PostgreSQL goes through psycopg 3. A URL that
    names no database jobq runs on is refused as every command refuses it (service.store.urls)."""
    if database_dialect(database_url) == "sqlite":
        return database_url
    for prefix in POSTGRES_PREFIXES:
        if database_url.startswith(prefix):
            return "postgresql+psycopg://" + database_url[len(prefix) :]
    raise AssertionError("database_dialect accepts only these prefixes")


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_folder()))
    config.attributes["database_url"] = database_url
    return config


def upgrade(
    database_url: str,
    revision: str = "head",
    *,
    wait_seconds: float = 0.0,
    lock_timeout_seconds: float | None = None,
    report: Report | None = None,
) -> SchemaStatus:
    """Migrate up to ``revision``: see :func:`_migrate` for the waits and locks. Answers where the
    schema stood before. A schema ahead of this release is left as it is: when its newer revisions
    are marked compatible (a rollback) there is nothing to do; otherwise :class:`SchemaMismatch`."""
    found: list[SchemaStatus] = []

    def run(config: Config, connection: Connection) -> None:
        status = _status_on(connection, ScriptDirectory.from_config(config))
        connection.commit()  # the read's transaction: the revisions open their own
        found.append(status)
        if status.state == "ahead":
            raise status.mismatch()
        if status.state != "ahead, compatible":
            command.upgrade(config, revision)  # at head already: nothing but the compatibility rows

    _migrate(database_url, run, wait_seconds, lock_timeout_seconds, report)
    return found[-1]


def downgrade(
    database_url: str,
    revision: str = "base",
    *,
    lock_timeout_seconds: float | None = None,
    report: Report | None = None,
) -> None:
    _migrate(database_url, lambda config, _: command.downgrade(config, revision), 0.0, lock_timeout_seconds, report)


def _migrate(
    database_url: str,
    run: Callable[[Config, Connection], None],
    wait_seconds: float,
    lock_timeout_seconds: float | None,
    report: Report | None,
) -> None:
    """Run Alembic on one connection of our own (env.py uses it), so that on PostgreSQL:

    - the database is waited for, up to ``wait_seconds`` (a fleet and its database start together);
    - only one migrate runs at a time: the session holds :data:`MIGRATE_LOCK_KEY`, an advisory lock
      no other part of jobq takes (a second migrate waits, then finds nothing to do);
    - every DDL step waits at most ``lock_timeout_seconds`` (None: :data:`LOCK_TIMEOUT_SECONDS`) for a table lock. A step queued behind a
      long transaction would otherwise queue every claim and heartbeat behind itself; instead it
      gives up, its revision rolls back (one transaction per revision, env.py), and it is retried
      with backoff, :data:`LOCK_RETRIES` times.
    """
    say = report or (lambda line: None)
    lock_timeout_seconds = lock_timeout_seconds or LOCK_TIMEOUT_SECONDS
    url = sqlalchemy_url(database_url)
    postgres = url.startswith("postgresql")
    connect_args = _postgres_connect_args() if postgres else {}
    engine = create_engine(url, poolclass=pool.NullPool, connect_args=connect_args)
    config = alembic_config(database_url)
    try:
        with _translate(), _connect(engine, wait_seconds, say) as connection:
            config.attributes["connection"] = connection
            if not postgres:
                run(config, connection)
                return
            connection.execute(
                text("SELECT set_config('lock_timeout', :ms, false)"), {"ms": f"{round(lock_timeout_seconds * 1000)}ms"}
            )
            connection.commit()
            with _one_migration_at_a_time(connection, say):
                _retry_on_lock_timeout(lambda: run(config, connection), connection, lock_timeout_seconds, say)
    finally:
        engine.dispose()


@contextmanager
def _connect(engine: sqlalchemy.Engine, wait_seconds: float, say: Report) -> Iterator[Connection]:
    """A connection, retried with backoff for up to ``wait_seconds`` while the database does not answer."""
    started = time.monotonic()
    pause, next_report = 0.5, started
    while True:
        try:
            connection = engine.connect()
            break
        except sqlalchemy.exc.OperationalError as exc:
            waited = time.monotonic() - started
            if waited >= wait_seconds:
                raise
            if time.monotonic() >= next_report:
                say(f"waiting for the database ({waited:.0f} s of {wait_seconds:g} s): {_first_line(exc)}")
                next_report = time.monotonic() + REPORT_SECONDS
            time.sleep(min(pause, max(0.0, wait_seconds - waited)))
            pause = min(pause * 2, REPORT_SECONDS)
    with connection:
        yield connection


@contextmanager
def _one_migration_at_a_time(connection: Connection, say: Report) -> Iterator[None]:
    """Hold the migrate advisory lock (session-level: it outlives the revisions' commits)."""
    reported = 0.0
    while not connection.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": MIGRATE_LOCK_KEY}).scalar():
        connection.commit()
        if time.monotonic() - reported >= REPORT_SECONDS:
            say("another jobq migrate is running: waiting for it to finish")
            reported = time.monotonic()
        time.sleep(0.5)
    connection.commit()
    try:
        yield
    finally:
        connection.rollback()  # a failed step may leave its transaction open
        connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATE_LOCK_KEY})
        connection.commit()


def _retry_on_lock_timeout(run: Callable[[], None], connection: Connection, timeout: float, say: Report) -> None:
    pause = 1.0
    for attempt in range(LOCK_RETRIES + 1):
        try:
            run()
            return
        except sqlalchemy.exc.DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE or attempt == LOCK_RETRIES:
                raise
            connection.rollback()
            say(
                f"a migration step waited {timeout:g} s for a lock another transaction holds, and gave up "
                f"(claims are not kept waiting behind it); retry {attempt + 1} of {LOCK_RETRIES} in {pause:g} s"
            )
            time.sleep(pause)
            pause = min(pause * 2, 10.0)


def _first_line(exc: sqlalchemy.exc.DBAPIError) -> str:
    message = str(exc.orig or exc).strip()
    return message.splitlines()[0] if message else type(exc).__name__


@contextmanager
def _translate(failed: str = "cannot migrate") -> Iterator[None]:
    """SQLAlchemy's connection errors, as the store's own: StoreUnavailable."""
    try:
        yield
    except sqlalchemy.exc.DBAPIError as exc:
        raise StoreUnavailable(f"{failed}: {_first_line(exc)}") from exc


def is_at_head(database_url: str) -> bool:
    """True when the database's schema is at this release's newest migration (tests, the drift check)."""
    return schema_status(database_url).state == "current"


def schema_status(database_url: str) -> SchemaStatus:
    """Where the database's schema stands against this release (readiness, the worker's start)."""
    scripts = ScriptDirectory.from_config(alembic_config(database_url))
    url = sqlalchemy_url(database_url)
    # A host that drops packets would otherwise hold a readiness check or the worker's
    # start-up wait for the kernel's TCP timeout (minutes): give up as the listener does.
    connect_args = _postgres_connect_args() if url.startswith("postgresql") else {}
    engine = create_engine(url, poolclass=pool.NullPool, connect_args=connect_args)
    try:
        with _translate("cannot read the schema version"), engine.connect() as connection:
            return _status_on(connection, scripts)
    finally:
        engine.dispose()


def _status_on(connection: Connection, scripts: ScriptDirectory) -> SchemaStatus:
    heads = set(scripts.get_heads())
    current = set(MigrationContext.configure(connection).get_current_heads())
    state: SchemaState
    if current == heads:
        state = "current"
    elif all(_knows(scripts, revision) for revision in current):
        state = "behind"
    else:  # a revision this release does not know: a newer release's
        served = (
            set(connection.execute(select(schema_compatibility.c.revision)).scalars())
            if _has_table(connection)
            else set()
        )
        state = "ahead, compatible" if heads <= served else "ahead"
    return SchemaStatus(state, ", ".join(sorted(current)) or "none", ", ".join(sorted(heads)))


def record_compatibility(connection: Connection, scripts: ScriptDirectory) -> None:
    """Write the releases the schema now serves into ``schema_compatibility`` (alembic/env.py calls
    this after every migration run): the current revision, then each older one for as long as the
    newer revision's module says ``compatible_with_previous = True``. Nothing before migration 0011."""
    if not _has_table(connection):
        return
    served: list[str] = []
    for head in MigrationContext.configure(connection).get_current_heads():
        script = scripts.get_revision(head)
        served.append(head)
        while script is not None and getattr(script.module, COMPATIBLE_MARKER, False) is True:
            if not isinstance(script.down_revision, str):
                break  # the base, or a merge point: stop where the chain is not one line
            served.append(script.down_revision)
            script = scripts.get_revision(script.down_revision)
    connection.execute(delete(schema_compatibility))
    if served:
        connection.execute(insert(schema_compatibility), [{"revision": revision} for revision in dict.fromkeys(served)])


def _has_table(connection: Connection) -> bool:
    return inspect(connection).has_table(schema_compatibility.name)


def _knows(scripts: ScriptDirectory, revision: str) -> bool:
    try:
        return scripts.get_revision(revision) is not None
    except CommandError:  # alembic's "Can't locate revision": a newer release's revision
        return False
