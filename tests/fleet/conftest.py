"""Fixtures of the fleet tests: the worker fixtures (a fleet of real processes, direct SQL)."""

from tests.worker.conftest import fleet, pg

__all__ = ["fleet", "pg"]
