"""The wheel is what users install: built from the sources, installed non-editable into
a fresh virtualenv, it migrates SQLite and PostgreSQL from a directory that is not
the checkout, with the migrations it carries inside the package (service.alembic).

The fresh virtualenv gets no pip and downloads nothing: the wheel goes in with
``--no-deps`` through this run's pip, and the dependencies come from this run's own
site-packages, named in a .pth file. A .pth file only adds its lines to sys.path
(the .pth files in a folder it adds are not run), so the editable install of jobq
that lives there stays inert: ``service`` resolves to the wheel's copy, which the
tests check.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic.script import ScriptDirectory

from service.store.migrate import alembic_config
from tests.conftest import PostgresServer, sqlite_url_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
# What the build reads; copied out, so setuptools' build/ and egg-info never land in
# the checkout, and a stale build/ folder cannot put deleted files into the wheel.
BUILD_INPUTS = ("pyproject.toml", "README.md", "service", "alembic")


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBQ_") and k != "PYTHONPATH"}
    return subprocess.run(
        command, cwd=cwd, env=environ, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180
    )


def _checked(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"{result.args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("wheel-source")
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    _checked(_run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)], out))
    (built,) = out.glob("jobq-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtualenv holding the wheel (not editable); answers its bin/ folder."""
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    _checked(_run([sys.executable, "-m", "venv", "--without-pip", str(venv)], venv.parent))
    python = venv / "bin" / "python"
    _checked(_run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                   "--no-index", str(wheel)], venv.parent))  # fmt: skip
    purelib = _checked(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                            venv.parent)).stdout.strip()  # fmt: skip
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    Path(purelib, "jobq-test-dependencies.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    yield venv / "bin"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A working directory with no alembic/ or service/ of the checkout in reach."""
    assert not tmp_path.resolve().is_relative_to(ROOT)
    return tmp_path


def _head() -> str:
    (head,) = ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()
    return head


def _migrate(bin_dir: Path, url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run([str(bin_dir / "jobq"), "--database-url", url, "migrate"], cwd)


def test_the_installed_package_is_the_wheel_not_the_checkout(installed: Path, outside: Path):
    found = _checked(_run([str(installed / "python"), "-c",
                           "import service, service.store.migrate as m; print(service.__file__); "
                           "print(m.migrations_folder())"], outside)).stdout.split()  # fmt: skip
    venv = installed.parent.resolve()
    assert all(Path(path).resolve().is_relative_to(venv) for path in found), found
    assert Path(found[1]).name == "alembic" and Path(found[1]).parent.name == "service"


def test_jobq_migrate_from_the_wheel_on_sqlite(installed: Path, outside: Path):
    path = outside / "fresh.db"
    result = _checked(_migrate(installed, sqlite_url_for(path), outside))
    assert "Traceback" not in result.stderr
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(_head(),)]
        assert conn.execute("SELECT count(*) FROM jobs").fetchone() == (0,)


def test_jobq_migrate_from_the_wheel_on_postgres(installed: Path, outside: Path, postgres_server: PostgresServer):
    name = postgres_server.new_name("wheel")
    url = postgres_server.create_database(name)
    try:
        _checked(_migrate(installed, url, outside))
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(_head(),)]
            assert conn.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    finally:
        postgres_server.drop_database(name)


def test_the_wheel_carries_the_alembic_environment_and_every_migration(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    versions = {f"service/alembic/versions/{p.name}" for p in (ROOT / "alembic" / "versions").glob("*.py")}
    assert versions, "no migrations found in alembic/versions"
    expected = {"service/alembic/env.py", "service/alembic/script.py.mako", *versions}
    assert expected - names == set()
    assert not any(name.endswith("alembic.ini") or "__pycache__" in name for name in names)


def test_the_wheel_carries_the_consoles_templates_and_assets(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    console = ROOT / "service" / "console"
    expected = {
        f"service/console/{p.relative_to(console).as_posix()}"
        for folder in ("templates", "static")
        for p in (console / folder).iterdir()
    }
    assert {"service/console/templates/base.html", "service/console/static/console.js"} <= expected
    assert expected - names == set()


def test_the_wheel_carries_every_sql_file_of_the_stores(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {p.relative_to(ROOT).as_posix() for p in (ROOT / "service" / "store").rglob("sql/*.sql")}
    assert {"service/store/postgres/sql/claim.sql", "service/store/sql/scopes.sql"} <= expected
    assert expected - names == set()


def test_the_store_loads_its_statements_from_the_installed_wheel(installed: Path, outside: Path):
    found = _checked(_run([str(installed / "python"), "-c",
                           "from service.store.sqlfiles import statements; "
                           "print(len(statements('postgres')), len(statements('sqlite')))"],
                          outside)).stdout.split()  # fmt: skip
    assert all(int(count) >= 50 for count in found), found
