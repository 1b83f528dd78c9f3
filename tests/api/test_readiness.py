"""``GET /readyz`` probed as Kubernetes probes it: it must not cost the database a session each time."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from tests.api.conftest import LiveApi

pytestmark = pytest.mark.postgres_only(reason="sessions are PostgreSQL's (pg_stat_database.sessions)")


def sessions(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()").fetchone()
        assert row is not None
        return int(row[0])


def test_twenty_readiness_probes_open_no_database_session_each(start_api: Callable[..., LiveApi], pg_url: str) -> None:
    http = start_api(pg_url).http()
    assert http.get("/readyz").json() == {"status": "ready"}  # the schema read once, the pool warm
    before = sessions(pg_url)
    for _ in range(20):
        assert http.get("/readyz").json() == {"status": "ready"}
    # The counter is the server's, up to a statistics interval late: read it once more after.
    opened = sessions(pg_url) - before - 1  # less the reading's own session
    assert opened <= 2, f"{opened} sessions for 20 probes"
