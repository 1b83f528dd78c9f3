"""jobq through a real PgBouncer in transaction mode (Debian 12's 1.18: no prepared statements
across transactions, no ``options`` startup parameter): ``jobq migrate``, the CLI, the REST
API, a worker and the producer API each do their work through it, with the settings the
README gives (``JOBQ_NOTIFY=false``, ``JOBQ_PREPARE`` left at ``auto``).

Each test repeats its statements past psycopg's prepare threshold (five runs on one
connection), so a statement that would be prepared is prepared, or would be.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from service import App, Queue
from service.config import Settings
from service.errors import StoreUnavailable
from service.jobs import JobState, NewJob
from service.store import Store, open_store
from service.store.migrate import is_at_head
from service.store.postgres.submit import COPY_FROM_JOBS
from tests.api.conftest import run_api
from tests.cli.test_cli import jobq
from tests.conftest import Database, PostgresServer
from tests.pgbouncer import PgBouncer
from tests.worker.harness import WorkerProcess, wait_until
from tests.worker.test_worker_in_process import running_worker

pytestmark = pytest.mark.postgres_only(reason="PgBouncer pools PostgreSQL")

BEHIND_A_POOLER = {"JOBQ_NOTIFY": "false"}


@pytest.fixture
def pooled_url(pgbouncer: Callable[..., PgBouncer], pg_url: str) -> str:
    """This test's database through a PgBouncer of two server connections."""
    return pgbouncer(pool_size=2).url(pg_url)


def test_jobq_migrate_through_pgbouncer(
    pgbouncer: Callable[..., PgBouncer], postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """From an empty database to the newest schema, then again (nothing to do), through the pooler."""
    name = postgres_server.new_name("empty")
    direct = postgres_server.create_database(name)
    bouncer = pgbouncer(pool_size=1)
    try:
        for _ in range(2):
            migrated = jobq("migrate", url=bouncer.url(direct), cwd=tmp_path)
            assert migrated.returncode == 0, migrated.stderr
        assert is_at_head(direct)
    finally:
        bouncer.stop()  # its server connection, before the drop
        postgres_server.drop_database(name)


def test_the_cli_through_pgbouncer(pooled_url: str, tmp_path: Path, pg: Database) -> None:
    def run(*args: str) -> str:
        result = jobq(*args, url=pooled_url, cwd=tmp_path, env=BEHIND_A_POOLER)
        assert result.returncode == 0, f"jobq {' '.join(args)}: {result.stderr}"
        return result.stdout

    ids = [run("enqueue", "sleep", "--payload", json.dumps({"seconds": n})).strip() for n in range(3)]
    assert json.loads(run("status", ids[0], "--json"))["state"] == "queued"
    assert len(json.loads(run("list", "--json"))["items"]) == 3
    run("cancel", ids[1])
    pg.execute("UPDATE jobs SET state = 'failed', error = 'boom', finished_at = now() WHERE id = %(id)s", id=ids[2])
    assert ids[2] in run("failures")
    run("replay", "--id", ids[2])
    assert "sleep" in run("stats")
    assert run("explain", ids[0])
    states = {row["id"]: row["state"] for row in pg.rows("SELECT id::text AS id, state FROM jobs")}
    assert states == {ids[0]: "queued", ids[1]: "cancelled", ids[2]: "queued"}


def test_the_api_and_a_worker_through_pgbouncer(pooled_url: str, tmp_path: Path, pg: Database) -> None:
    """Submit and poll over HTTP (long polls re-read: no NOTIFY behind a pooler); a worker runs
    the jobs; the worker says once that it prepares nothing, and never loses the database."""
    api = run_api(Settings(database_url=pooled_url, notify=False))
    worker = WorkerProcess(
        pooled_url, tmp_path, "worker", ["--concurrency", "2", "--poll-seconds", "0.3"], env=BEHIND_A_POOLER
    )
    try:
        http = api.http(api.token())
        submitted = [http.post("/v1/jobs", json={"kind": "sleep", "payload": {"seconds": 0.05}}) for _ in range(12)]
        assert {response.status_code for response in submitted} == {202}
        for response in submitted:
            status = response.json()
            deadline = time.monotonic() + 60
            while status["state"] not in ("succeeded", "failed", "cancelled"):
                assert time.monotonic() < deadline, status
                polled = http.get(response.headers["Location"], params={"wait": 5})
                assert polled.status_code == 200, polled.text
                status = polled.json()
            assert status["state"] == "succeeded", status
            assert http.get(status["result_url"]).json()["result"] == {"slept": 0.05}
    finally:
        api.stop()
        worker.terminate()
        worker.wait(30)
    assert pg.count("job_attempts", "outcome = 'succeeded'") == 12
    assert len(worker.events("store.prepare_off")) == 1, worker.log()
    assert worker.events("store.unavailable") == [], worker.log()


def test_the_producer_api_through_pgbouncer(pooled_url: str, pg: Database) -> None:
    """Enqueue (one by one, and a batch big enough for COPY), wait, read the result, cancel, and
    enqueue in the caller's own transaction on its own connection through the pooler."""
    app = App()
    app.register("double", lambda ctx: {"value": ctx.payload["x"] * 2})
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    with Queue(pooled_url, settings=Settings(notify=False)) as queue, running_worker(queue.store, app):
        jobs = [queue.enqueue("double", {"x": n}) for n in range(8)]
        batch = queue.enqueue_many([{"kind": "double", "payload": {"x": 1}}] * COPY_FROM_JOBS)
        later = queue.enqueue("double", {"x": 0}, delay_seconds=3600)
        assert queue.cancel(later.id).state is JobState.CANCELLED
        for n, job in enumerate(jobs):
            assert queue.wait(job.id, timeout=60).state is JobState.SUCCEEDED
            assert queue.result(job.id) == {"value": 2 * n}
        assert queue.wait(batch[-1].id, timeout=60).state is JobState.SUCCEEDED

        # The caller's connection is the caller's to configure: behind this pooler, no prepared statements.
        with psycopg.connect(pooled_url, prepare_threshold=None) as conn:
            for order in range(6):
                conn.execute("INSERT INTO orders VALUES (%s)", [order])
                ordered = queue.enqueue("double", {"x": 21}, connection=conn)
                conn.commit()
        assert queue.wait(ordered.id, timeout=60).state is JobState.SUCCEEDED
        assert queue.result(ordered.id) == {"value": 42}
    assert pg.count("orders") == 6
    assert pg.count("jobs", "state = 'succeeded'") == 8 + COPY_FROM_JOBS + 6


def _hot_statements(store: Store, rounds: int) -> None:
    """The statements a worker repeats, each more often than psycopg's prepare threshold."""
    for _ in range(rounds):
        store.enqueue_many([_job()])
        for job in store.claim("w", ["default"], 1, 30):
            store.complete(job.lease, None)


def _job() -> NewJob:
    return NewJob(kind="k", payload={"n": uuid.uuid4().hex})


@pytest.fixture
def two_stores(pgbouncer: Callable[..., PgBouncer], pg_url: str) -> Iterator[Callable[[str], list[Store]]]:
    """Two stores (two processes' worth) on one server connection of a PgBouncer: any name one
    prepares is on the connection the other runs on."""
    opened: list[Store] = []
    url = pgbouncer(pool_size=1).url(pg_url)

    def open_two(prepare: str) -> list[Store]:
        stores = [open_store(Settings(database_url=url, notify=False, prepare=prepare)) for _ in range(2)]
        opened.extend(stores)
        return stores

    yield open_two
    for store in opened:
        store.close()


@pytest.mark.parametrize("prepare", ["auto", "off"])
def test_stores_that_prepare_nothing_share_a_pooler(
    two_stores: Callable[[str], list[Store]], prepare: str, pg: Database, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobq.store")
    stores = two_stores(prepare)
    for _ in range(4):
        for store in stores:
            _hot_statements(store, 3)
    assert pg.count("jobs", "state = 'succeeded'") == 24
    said = [r for r in caplog.records if r.getMessage() == "store.prepare_off"]
    # `auto` finds the pooler when each store's connection is made: one line per store (per process).
    assert len(said) == (2 if prepare == "auto" else 0)


def test_preparing_through_a_pooler_that_loses_prepared_statements_names_the_setting(
    two_stores: Callable[[str], list[Store]],
) -> None:
    """JOBQ_PREPARE=on, as on PgBouncer 1.21+ with max_prepared_statements: on 1.18 the stores'
    names meet on the shared server connection, and the error says what to set."""
    stores = two_stores("on")
    with pytest.raises(StoreUnavailable, match="set JOBQ_PREPARE=off") as lost:
        for _ in range(4):
            for store in stores:
                _hot_statements(store, 3)
    assert "prepared statement" in str(lost.value)


def test_a_worker_through_pgbouncer_with_item_jobs_and_a_lease_lost_to_a_kill(
    pooled_url: str, tmp_path: Path, make_store: Callable[..., Store], pg: Database
) -> None:
    """Heartbeats with item outcomes, the reaper and the claim's refill, through the pooler:
    a job whose worker was killed comes back and finishes on another worker."""
    env = {**BEHIND_A_POOLER, "JOBQ_SIDE_EFFECT_URL": pg.url}
    args = ["--concurrency", "1", "--lease-seconds", "2", "--poll-seconds", "0.3"]
    pg.execute("CREATE TABLE side_effects (job_id uuid PRIMARY KEY, worker text NOT NULL)")
    pg.execute("CREATE TABLE side_effect_runs (job_id uuid NOT NULL, worker text NOT NULL, attempt int NOT NULL)")
    store = make_store(pooled_url, notify=False)
    [slow] = store.enqueue_many([NewJob(kind="itemised", payload={"items": 10, "delay": 0.5})])
    first = WorkerProcess(pooled_url, tmp_path, "first", args, env=env, app="tests.pooler.apps")
    second: WorkerProcess | None = None
    try:
        wait_until(lambda: pg.job(slow.id)["done"] >= 2, 60, what="the first worker's progress")
        first.kill()
        second = WorkerProcess(pooled_url, tmp_path, "second", args, env=env, app="tests.pooler.apps")
        wait_until(lambda: pg.job(slow.id)["state"] == "succeeded", 60, what="the job to finish on the second worker")
    finally:
        first.kill()
        if second is not None:
            second.kill()
    assert [a["outcome"] for a in pg.attempts(slow.id)] == ["lease_expired", "succeeded"]
    assert pg.count("job_items", "job_id = %(id)s AND state = 'ok'", id=slow.id) == 10
    assert pg.count("side_effects") == 1
