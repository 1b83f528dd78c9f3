"""The PostgreSQL store through a real server stop: while the server is down every call fails fast,
and the first call after it is back succeeds, however long it was down. The server is a private
cluster (tests/private_postgres.py): the shared test server is never stopped."""

from __future__ import annotations

import time

import pytest

from service.config import Settings
from service.errors import StoreUnavailable
from service.store import migrate, open_store
from tests.private_postgres import PrivateServer, private_server  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.postgres_only(reason="a PostgreSQL server stopped and started")]

DOWN_SECONDS = 16.0
"""Longer than psycopg_pool's first four reconnection waits (1 + 2 + 4 + 8 s): with its defaults
the pool's next attempt would come ~15 s after the server is back."""


def timed_failure(call: object) -> float:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="no PostgreSQL connection: .*refused"):
        call()  # type: ignore[operator]
    return time.monotonic() - started


def test_calls_fail_at_once_while_the_server_is_down_and_succeed_as_soon_as_it_is_back(
    private_server: PrivateServer,  # noqa: F811
) -> None:
    migrate.upgrade(private_server.url)
    store = open_store(Settings(database_url=private_server.url))
    try:
        assert store.has_claimable(["default"], None) is False
        private_server.stop()
        stopped = time.monotonic()
        # The pool's idle connection was hung up on; the first call finds that, the next ones know.
        failures = [timed_failure(lambda: store.has_claimable(["default"], None)) for _ in range(3)]
        assert max(failures) < 2.0, failures  # each waited the pool's whole 10 s before
        while time.monotonic() - stopped < DOWN_SECONDS:
            assert timed_failure(lambda: store.has_claimable(["default"], None)) < 2.0
            time.sleep(1)
        private_server.start()
        back = time.monotonic()
        while True:
            try:
                assert store.has_claimable(["default"], None) is False
                break
            except StoreUnavailable:
                assert time.monotonic() - back < 5.0, "the store did not reconnect within 5 s"
                time.sleep(0.2)
        print(f"\noutage: calls failed in {max(failures):.3f} s at most; back {time.monotonic() - back:.2f} s "
              f"after the server")  # fmt: skip
    finally:
        store.close()
