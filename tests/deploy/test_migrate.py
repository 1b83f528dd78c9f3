"""`jobq migrate` as the migration Job runs it, on a real PostgreSQL: it waits for a database that
is not there yet, a step stuck behind a long transaction gives up after --lock-timeout instead of
queueing the claims behind itself (and is retried), and two migrates never run at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psycopg
import pytest
from alembic.script import ScriptDirectory

from service.store.migrate import MIGRATE_LOCK_KEY, alembic_config, downgrade, is_at_head
from tests.conftest import PostgresServer

pytestmark = pytest.mark.postgres_only(reason="advisory locks and lock_timeout are PostgreSQL's")

JOBQ = [sys.executable, "-m", "service"]


def start_migrate(url: str, *options: str) -> subprocess.Popen[str]:
    env = {**os.environ, "JOBQ_DATABASE_URL": url}
    return subprocess.Popen(
        [*JOBQ, "migrate", *options], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(process: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=timeout)
    return process.returncode, stderr


@pytest.fixture
def missing_database(postgres_server: PostgresServer) -> Iterator[tuple[str, str]]:
    """The name and URL of a database that does not exist yet (dropped after the test if made)."""
    name = postgres_server.new_name("later")
    yield name, postgres_server.url(name)
    postgres_server.drop_database(name)


def test_waits_for_the_database_then_migrates(
    postgres_server: PostgresServer, missing_database: tuple[str, str]
) -> None:
    name, url = missing_database
    started = time.monotonic()
    migrate = start_migrate(url, "--wait-for-database", "60")
    time.sleep(7)
    assert migrate.poll() is None, "still waiting"
    postgres_server.create_database(name)
    code, stderr = finish(migrate)
    waited = time.monotonic() - started
    assert code == 0, stderr
    assert is_at_head(url)
    waits = [line for line in stderr.splitlines() if "waiting for the database" in line]
    assert 1 <= len(waits) <= waited / 5 + 1, f"one line per 5 s at most: {waits}"


def test_gives_up_waiting_with_one_line_and_exit_3(missing_database: tuple[str, str]) -> None:
    _, url = missing_database
    started = time.monotonic()
    code, stderr = finish(start_migrate(url, "--wait-for-database", "2"))
    assert code == 3 and time.monotonic() - started >= 2
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1].startswith("error: cannot migrate:")


INDEXING_REVISION = "0010"  # its upgrade creates an index on jobs (ix_jobs_due): a SHARE lock on jobs


def previous_revision(url: str) -> str:
    """The revision before INDEXING_REVISION: upgrading from there takes the SHARE lock."""
    script = ScriptDirectory.from_config(alembic_config(url)).get_revision(INDEXING_REVISION)
    assert script is not None and isinstance(script.down_revision, str)
    return script.down_revision


def timed_write(url: str) -> float:
    """Seconds a write to jobs (as a claim makes) takes."""
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.monotonic()
        conn.execute("UPDATE jobs SET priority = priority WHERE false")
        return time.monotonic() - started


def test_a_step_behind_a_long_transaction_gives_up_and_is_retried(pg_url: str) -> None:
    """Revision 0010 takes a SHARE lock on jobs (CREATE INDEX); a transaction that wrote to jobs
    and stays open blocks it. Claims must not queue behind the waiting step for longer than the lock
    timeout; the step is retried and succeeds once the transaction ends."""
    downgrade(pg_url, previous_revision(pg_url))
    with psycopg.connect(pg_url) as holder:
        holder.execute("UPDATE jobs SET priority = priority WHERE false")  # holds ROW EXCLUSIVE until commit
        migrate = start_migrate(pg_url, "--lock-timeout", "0.5")
        deadline = time.monotonic() + 8
        slowest = 0.0
        while time.monotonic() < deadline:
            slowest = max(slowest, timed_write(pg_url))
            time.sleep(0.1)
        assert migrate.poll() is None, "still retrying while the transaction lasts"
        assert slowest < 2.0, f"a write waited {slowest:.1f} s behind the migration"
        holder.commit()
        code, stderr = finish(migrate)
    assert code == 0, stderr
    assert "gave up" in stderr and "retry 1 of" in stderr
    assert is_at_head(pg_url)


def test_two_migrates_run_one_at_a_time(postgres_server: PostgresServer) -> None:
    url = postgres_server.create_database()
    try:
        # While another holds the lock, a migrate waits, says so, and changes nothing.
        with psycopg.connect(url, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_LOCK_KEY,))
            waiting = start_migrate(url)
            time.sleep(4)
            assert waiting.poll() is None
            tables = other.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'jobs'").fetchone()
            assert tables == (0,), "nothing migrated while the lock is held elsewhere"
            other.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK_KEY,))
            code, stderr = finish(waiting)
        assert code == 0 and "another jobq migrate is running" in stderr, stderr
        # Two at once on an empty database: both succeed, one after the other.
        second_url = postgres_server.create_database()
        both = [start_migrate(second_url), start_migrate(second_url)]
        results = [finish(p) for p in both]
        assert [code for code, _ in results] == [0, 0], results
        assert is_at_head(second_url)
        postgres_server.drop_database(second_url.rsplit("/", 1)[1])
    finally:
        postgres_server.drop_database(url.rsplit("/", 1)[1])
