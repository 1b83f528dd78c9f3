"""Fixtures of the pooler tests: the worker tests' ``fleet`` and ``pg`` (tests/worker/conftest.py);
``pgbouncer`` is every package's (tests/conftest.py)."""

from tests.worker.conftest import fleet, pg

__all__ = ["fleet", "pg"]
