"""Fixtures of the worker tests: a fleet of real worker processes, a direct SQL helper."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Database
from tests.worker.harness import Fleet


@pytest.fixture
def fleet(pg_url: str, tmp_path: Path) -> Iterator[Fleet]:
    """Worker processes on this test's PostgreSQL database, all killed when the test ends."""
    group = Fleet(pg_url, tmp_path)
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture
def store_fleet(store_url: str, tmp_path: Path) -> Iterator[Fleet]:
    """``fleet`` on this test's ``store_url``: SQLite and PostgreSQL."""
    group = Fleet(store_url, tmp_path)
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture
def pg(pg_url: str) -> Iterator[Database]:
    """Direct SQL on this test's PostgreSQL database."""
    database = Database(pg_url)
    yield database
    database.close()
