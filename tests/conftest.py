"""Test infrastructure every test package shares: databases, stores, a pinned clock.

Where PostgreSQL comes from, in order:

1. ``JOBQ_TEST_DATABASE_URL`` (any database on the server; the tests create and
   drop their own databases next to it, so the role needs CREATEDB);
2. a throw-away container (testcontainers), only if a Docker engine answers;
3. nowhere: PostgreSQL tests skip, loudly (header, skip reason, summary) — or,
   with ``JOBQ_REQUIRE_POSTGRES=1`` (CI), the run stops with a usage error.

Isolation is per test and cheap: the migrations run once per session into a
template (a PostgreSQL database, a SQLite file); each test gets a copy
(``CREATE DATABASE … TEMPLATE …``, a file copy), dropped after it. PostgreSQL
copies are made ahead on background threads and dropped in concurrent batches
(see :class:`PostgresServer`), so a test rarely waits for either.

Fixtures (usable from any package under tests/):

- ``clock``         a :class:`FakeClock`; stores built with it never read the real time.
- ``pg_url``        a fresh migrated PostgreSQL database for this test.
- ``sqlite_url``    a fresh migrated SQLite file for this test.
- ``store_url``     either of them: tests that take it run once per store (ids ``sqlite``, ``postgres``).
- ``make_store``    ``make_store(url, clock=None, **settings)``: an open store, closed after the test.
- ``store``         ``make_store(store_url, clock=clock)``: pinned to ``clock``.
- ``db``            a :class:`Database` on the test's ``store_url``, to assert on rows the
                    same way on both stores (``db.scalar("SELECT count(*) FROM job_attempts")``).
- ``postgres_server`` the session's :class:`PostgresServer` (create or drop databases).
- ``pgbouncer``     ``pgbouncer(pool_size=10)``: a real PgBouncer of the test's own in transaction
                    mode in front of the test server (tests/pgbouncer.py), stopped after the test;
                    ``.url(pg_url)`` is that database through it. Skipped without the binary,
                    failed then under ``JOBQ_REQUIRE_POSTGRES=1`` (CI installs it).

Mark a test ``@pytest.mark.postgres_only(reason=…)``: its ``sqlite`` variant is
skipped with that reason.

The suite runs on two processes (pytest-xdist, ``-n 2 --dist loadgroup`` in pyproject.toml; ``-n 0``
runs it in one). Each process has its own session fixtures (server, templates); the tests of a
module with a module-scoped fixture stay on one process, so the fixture is made once (see
:func:`pytest_collection_modifyitems`); ``@pytest.mark.xdist_group(name)`` keeps tests that must
never overlap (fleets of tens of processes and connections) on one process, one after another.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import re
import shutil
import sqlite3
import time
import uuid
import warnings
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from sqlalchemy.engine import make_url

from service.config import Settings
from service.store import Store, open_store
from service.store.migrate import upgrade
from tests.pgbouncer import PgBouncer, pgbouncer_binary

T = TypeVar("T")
DATABASE_URL_ENV = "JOBQ_TEST_DATABASE_URL"
REQUIRE_POSTGRES_ENV = "JOBQ_REQUIRE_POSTGRES"
POSTGRES_IMAGE = "postgres:16-alpine"

# -- the clock ------------------------------------------------------------------------


class FakeClock:
    """A clock that moves only when told. Pass it as a store's ``clock``.

    It starts on a whole second far from today, so a statement that reads the
    real clock instead of the pinned one shows up as a failing test.
    """

    START = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)

    def __init__(self, start: datetime = START) -> None:
        if start.tzinfo is None:
            raise ValueError("a FakeClock needs an aware datetime")
        self._now = start

    def now(self) -> datetime:
        return self._now

    __call__ = now  # a store's clock is any () -> datetime

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now

    def set(self, instant: datetime) -> None:
        self._now = instant

    def __repr__(self) -> str:
        return f"FakeClock({self._now.isoformat()})"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# -- where PostgreSQL comes from ----------------------------------------------------------


def _docker_answers() -> bool:
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        return False
    # docker's client leaves sockets behind when the daemon does not answer; with
    # filterwarnings=error their ResourceWarning would fail some unrelated test later.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            import docker

            client = docker.from_env(timeout=3)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except Exception:  # no docker package, no socket, no daemon: all mean "no"
            return False
        finally:
            gc.collect()


@dataclass
class _PostgresSource:
    kind: str  # "env", "docker" or "none"
    detail: str


_source: _PostgresSource | None = None
_undropped: list[str] = []  # errors of test databases left behind, shown in the summary


def postgres_source() -> _PostgresSource:
    """Decided once per run, before anything is started."""
    global _source
    if _source is None:
        if os.environ.get(DATABASE_URL_ENV):
            _source = _PostgresSource("env", f"from {DATABASE_URL_ENV}")
        elif _docker_answers():
            _source = _PostgresSource("docker", f"from a testcontainers {POSTGRES_IMAGE} container")
        else:
            _source = _PostgresSource(
                "none",
                f"PostgreSQL tests SKIPPED: {DATABASE_URL_ENV} is not set and no Docker engine answers "
                f"(set {DATABASE_URL_ENV}=postgresql://user@host:port/db, or start Docker; "
                f"{REQUIRE_POSTGRES_ENV}=1 turns this into an error)",
            )
    return _source


def postgres_required() -> bool:
    return os.environ.get(REQUIRE_POSTGRES_ENV, "").strip().lower() in {"1", "true", "yes"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "postgres_only(reason): runs on PostgreSQL only; the sqlite variant is skipped")
    if postgres_required() and postgres_source().kind == "none":
        raise pytest.UsageError(
            f"{REQUIRE_POSTGRES_ENV}=1 but there is no PostgreSQL: set {DATABASE_URL_ENV} or start Docker."
        )


def pytest_report_header(config: pytest.Config) -> str:
    source = postgres_source()
    return f"jobq PostgreSQL: {source.detail}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # On an xdist worker: its databases that could not be dropped go to the controller, which reports them.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["jobq_undropped"] = list(_undropped)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: only called when xdist runs the suite
def pytest_testnodedown(node: Any, error: object) -> None:
    _undropped.extend(getattr(node, "workeroutput", {}).get("jobq_undropped", []))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _undropped:
        terminalreporter.write_sep("!", f"{len(_undropped)} test database(s) could not be dropped", yellow=True)
        terminalreporter.write_line(f"first error: {_undropped[0]}", yellow=True)
    source = postgres_source()
    if source.kind != "none":
        return
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "PostgreSQL tests SKIPPED" in str(r.longrepr)]
    if skipped:
        terminalreporter.write_sep("!", f"{len(skipped)} PostgreSQL tests were SKIPPED", red=True, bold=True)
        terminalreporter.write_line(source.detail, red=True)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _keep_module_fixtures_on_one_process(items)
    for item in items:
        marker = item.get_closest_marker("postgres_only")
        callspec = getattr(item, "callspec", None)
        # Any parametrized database fixture (store_url, or a test's own) whose variant is "sqlite".
        if marker is None or callspec is None or "sqlite" not in callspec.params.values():
            continue
        reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "needs PostgreSQL")
        item.add_marker(pytest.mark.skip(reason=f"PostgreSQL only: {reason}"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under ``--dist loadgroup``, fail rather than run a partial suite: xdist schedules by node id, so
    two tests of one id run as one, and it names a test's group by appending it to the node id, which
    pytest 9.2 no longer reads (its groups were silently ignored: why pyproject.toml pins pytest below it)."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    ids = Counter(item.nodeid for item in session.items)
    twice = sorted(nodeid for nodeid, count in ids.items() if count > 1)
    ungrouped = [
        item.nodeid for item in session.items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid
    ]
    if twice or ungrouped:
        raise pytest.UsageError(
            f"xdist would not run the suite as written: node ids shared by several tests {twice[:3]}, "
            f"tests whose xdist_group is ignored {ungrouped[:3]}"
        )


def _keep_module_fixtures_on_one_process(items: list[pytest.Item]) -> None:
    """A module-scoped fixture is made once per process that runs a test of its module: on two,
    the analysts' six weeks of history were written twice, and the idle fleet's forty workers
    started twice at once (past the shared server's connections). So such a module's tests go to
    one process (xdist_group), unless the module names a group of its own."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        definitions = getattr(item, "_fixtureinfo", None)
        if definitions is None:
            continue
        scopes = {d.scope for defs in definitions.name2fixturedefs.values() for d in defs}
        if scopes & {"module", "class"}:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


# -- PostgreSQL: one server per session, a template, a database per test --------------------


def _with_database(url: str, name: str) -> str:
    return make_url(url).set(database=name).render_as_string(hide_password=False)


class PostgresServer:
    """The session's PostgreSQL server: creates and drops the tests' databases.

    ``admin_url`` names a database the tests only connect to (never change) to run
    ``CREATE DATABASE`` and ``DROP DATABASE``.

    Both statements are slow next to a store test, and a busy server makes them
    seconds: each ``DROP DATABASE`` waits for a checkpoint of its own. So copies of
    the template are made ahead of time on a few threads, and finished databases
    are dropped in batches of concurrent drops, which share their checkpoints
    (eight drops one after another took 9-16 s on a busy server; eight at once, 2 s).
    A test waits only when the server cannot keep up at all.
    """

    SPARE_COPIES = 4
    DROP_BATCH = 8

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.prefix = f"jobq_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self._counter = itertools.count()
        self._creator = ThreadPoolExecutor(self.SPARE_COPIES, "jobq-createdb")
        self._dropper = ThreadPoolExecutor(self.DROP_BATCH, "jobq-dropdb")
        self._spares: dict[str, deque[tuple[str, Future[str]]]] = {}
        self._to_drop: list[str] = []
        self._drops: list[Future[None]] = []

    def url(self, name: str) -> str:
        return _with_database(self.admin_url, name)

    def drop_leftovers(self) -> None:
        """Drop test databases that runs killed on this host left behind (their pid is gone).

        Only on a server on this host: elsewhere a pid says nothing about the run that made it.
        """
        host = make_url(self.admin_url).host
        if host not in (None, "", "localhost", "127.0.0.1", "::1"):
            return
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as conn:
            names = [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'jobq_test_%'")]
        for name in names:
            match = re.fullmatch(r"jobq_test_(\d+)_[0-9a-f]{6}_\w+", name)
            if match and not _process_alive(int(match.group(1))):
                self.drop_database(name)

    def new_name(self, what: str = "db") -> str:
        return f"{self.prefix}_{what}{next(self._counter)}"

    def create_database(self, name: str | None = None, *, template: str | None = None) -> str:
        """A new database now (empty, or a copy of ``template``); returns its URL."""
        name = name or self.new_name()
        sql = f'CREATE DATABASE "{name}"'  # names are ours (prefix + counter), never input
        if template:
            sql += f' TEMPLATE "{template}"'
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql)
        return self.url(name)

    def copy_of(self, template: str) -> tuple[str, str]:
        """A fresh copy of ``template``, made ahead of time: ``(name, url)``."""
        spares = self._spares.setdefault(template, deque())
        while len(spares) < self.SPARE_COPIES + 1:
            name = self.new_name()
            spares.append((name, self._creator.submit(self.create_database, name, template=template)))
        name, made = spares.popleft()
        try:
            return name, made.result()
        except psycopg.OperationalError:
            # The server went away while the copy was made ahead (a test restarts it): make one now.
            self.drop_database(name)
            name = self.new_name()
            return name, _patiently(lambda: self.create_database(name, template=template))

    def drop_database(self, name: str, *, wait: bool = False) -> None:
        """Drop a database, terminating its connections first: with the next batch, or now if ``wait``."""
        self._to_drop.append(name)
        if wait or len(self._to_drop) >= self.DROP_BATCH:
            self._drop_batch(wait=wait)

    def _drop_batch(self, *, wait: bool) -> None:
        batch = [self._dropper.submit(_patiently, partial(self._drop_now, n)) for n in self._to_drop]
        self._to_drop.clear()
        self._drops += batch  # a failed drop is reported at the end, never raised
        if wait:
            futures_wait(batch)

    def _drop_now(self, name: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [name],
            )
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def drop_spares(self, template: str) -> None:
        """Drop the copies of ``template`` made ahead that no test took."""
        for name, made in self._spares.pop(template, ()):
            if made.cancel():
                continue
            if made.exception() is None:
                self.drop_database(name)

    def close(self) -> list[str]:
        """Drop what is left; answers the errors of drops that failed (reported, not raised)."""
        for template in list(self._spares):
            self.drop_spares(template)
        self._creator.shutdown(wait=True)
        self._drop_batch(wait=True)
        self._dropper.shutdown(wait=True)
        return [str(f.exception()) for f in self._drops if f.exception() is not None]


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _patiently(operation: Callable[[], T], *, seconds: float = 30.0) -> T:
    """Run ``operation``, retrying while the server does not answer (a test may be restarting it)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return operation()
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _unavailable(message: str) -> None:
    if postgres_required():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    source = postgres_source()
    if source.kind == "none":
        _unavailable(source.detail)
    container = None
    if source.kind == "env":
        admin_url = os.environ[DATABASE_URL_ENV]
    else:
        try:
            from testcontainers.community.postgres import PostgresContainer
        except ImportError:  # older testcontainers
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                from testcontainers.postgres import PostgresContainer
        container = PostgresContainer(POSTGRES_IMAGE, driver=None)
        # Durability buys nothing in a throw-away container; speed does.
        container.with_command("postgres -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        container.start()
        admin_url = container.get_connection_url(driver=None)
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=10):
            pass
    except psycopg.Error as exc:
        if container is not None:
            container.stop()
        # A URL that was given but does not answer is a broken setup, never a skip.
        pytest.fail(f"PostgreSQL {source.detail} does not answer: {exc}", pytrace=False)
    server = PostgresServer(admin_url)
    server.drop_leftovers()
    try:
        yield server
    finally:
        _undropped.extend(server.close())
        if container is not None:
            container.stop()


@pytest.fixture(scope="session")
def pg_template(postgres_server: PostgresServer) -> Iterator[str]:
    """The name of a database migrated to head once per session; tests get copies of it."""
    name = postgres_server.new_name("template")
    upgrade(_patiently(lambda: postgres_server.create_database(name)))
    yield name
    postgres_server.drop_spares(name)
    postgres_server.drop_database(name, wait=True)


@pytest.fixture
def pg_url(postgres_server: PostgresServer, pg_template: str) -> Iterator[str]:
    """A fresh migrated PostgreSQL database, for this test only."""
    name, url = postgres_server.copy_of(pg_template)
    yield url
    postgres_server.drop_database(name)


@pytest.fixture
def pgbouncer(postgres_server: PostgresServer) -> Iterator[Callable[..., PgBouncer]]:
    """``pgbouncer(pool_size=10, max_client_conn=500)``: a running PgBouncer in transaction mode
    in front of the test server, stopped when the test ends (before its databases are dropped)."""
    if pgbouncer_binary() is None:
        _unavailable("pgbouncer is not installed (apt-get install pgbouncer; .ci/run installs it)")
    started: list[PgBouncer] = []

    def start(**settings: Any) -> PgBouncer:
        bouncer = PgBouncer.start(postgres_server.admin_url, **settings)
        started.append(bouncer)
        return bouncer

    yield start
    for bouncer in started:
        bouncer.close()


# -- SQLite: a migrated template file, copied per test ----------------------------------------


def sqlite_url_for(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "jobq.db"
    upgrade(sqlite_url_for(path))
    return path


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """A fresh migrated SQLite file, for this test only."""
    path = tmp_path / "jobq.db"
    shutil.copyfile(sqlite_template, path)
    return sqlite_url_for(path)


# -- both stores ----------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest) -> str:
    """A fresh migrated database on each store in turn."""
    return request.getfixturevalue("pg_url" if request.param == "postgres" else "sqlite_url")


def build_store(url: str, clock: Callable[[], datetime] | None = None, **settings: Any) -> Store:
    """An open store for ``url``."""
    return open_store(Settings(database_url=url, **settings), clock=clock)


@pytest.fixture
def make_store() -> Iterator[Callable[..., Store]]:
    """``make_store(url, clock=None, **settings)``: an open store, closed when the test ends."""
    opened: list[Store] = []

    def make(url: str, clock: Callable[[], datetime] | None = None, **settings: Any) -> Store:
        store = build_store(url, clock, **settings)
        opened.append(store)
        return store

    yield make
    for store in reversed(opened):
        store.close()


@pytest.fixture
def store(make_store: Callable[..., Store], store_url: str, clock: FakeClock) -> Store:
    """An open store on ``store_url``, pinned to ``clock``."""
    return make_store(store_url, clock=clock)


# -- reading rows the same way on both stores --------------------------------------------------

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
_JSON_COLUMNS = frozenset({"payload", "checkpoint", "body"})
_BOOL_COLUMNS = frozenset({"cancel_requested"})


def _is_time_column(name: str) -> bool:
    return name.endswith("_at") or name == "run_after"


class Database:
    """Direct SQL on a test database, for assertions (and for seeding rows a test needs).

    Write parameters as ``%(name)s``; they are rewritten to ``:name`` for SQLite.
    Rows come back as dicts normalised to one shape on both stores: ids as ``str``,
    timestamps as aware datetimes, JSON columns parsed, booleans as ``bool``.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.dialect = "sqlite" if url.startswith("sqlite:") else "postgresql"
        self._pg: psycopg.Connection[Any] | None = None
        self._sqlite: sqlite3.Connection | None = None
        if self.dialect == "sqlite":
            self._sqlite = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None, timeout=10)
        else:
            self._pg = psycopg.connect(url, autocommit=True)

    def rows(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        return [self._normalise(row) for row in self._run(sql, params)]

    def one(self, sql: str, **params: Any) -> dict[str, Any]:
        rows = self.rows(sql, **params)
        assert len(rows) == 1, f"expected one row, got {len(rows)}: {sql}"
        return rows[0]

    def scalar(self, sql: str, **params: Any) -> Any:
        row = self.one(sql, **params)
        return next(iter(row.values()))

    def execute(self, sql: str, **params: Any) -> None:
        self._run(sql, params)

    def count(self, table: str, where: str = "TRUE", **params: Any) -> int:
        """``SELECT count(*) FROM table WHERE …``; table names are the tests' own, never input."""
        return int(self.scalar(f"SELECT count(*) AS n FROM {table} WHERE {where}", **params))

    def job(self, job_id: uuid.UUID | str) -> dict[str, Any]:
        return self.one("SELECT * FROM jobs WHERE id = %(id)s", id=job_id)

    def attempts(self, job_id: uuid.UUID | str) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM job_attempts WHERE job_id = %(id)s ORDER BY id", id=job_id)

    def close(self) -> None:
        if self._pg is not None:
            self._pg.close()
        if self._sqlite is not None:
            self._sqlite.close()

    def _run(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        if self._pg is not None:
            cursor = self._pg.execute(sql, dict(params) or None)  # type: ignore[arg-type]
            if cursor.description is None:
                return []
            names = [c.name for c in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        assert self._sqlite is not None
        bound = {k: str(v) if isinstance(v, uuid.UUID) else v for k, v in params.items()}
        cursor = self._sqlite.execute(_PLACEHOLDER.sub(r":\1", sql), bound)
        try:
            if cursor.description is None:
                return []
            names = [c[0] for c in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        finally:
            cursor.close()

    @staticmethod
    def _normalise(row: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in row.items():
            if isinstance(value, uuid.UUID):
                value = str(value)
            elif isinstance(value, str) and _is_time_column(name):
                value = datetime.fromisoformat(value)
                if value.tzinfo is None:
                    value = value.replace(tzinfo=UTC)
            elif isinstance(value, str) and name in _JSON_COLUMNS:
                value = json.loads(value)
            elif isinstance(value, int) and name in _BOOL_COLUMNS:
                value = bool(value)
            out[name] = value
        return out


@pytest.fixture
def db(store_url: str) -> Iterator[Database]:
    """Direct SQL on the database of this test's ``store_url``."""
    database = Database(store_url)
    yield database
    database.close()
