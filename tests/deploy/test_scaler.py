"""jobq_slots_needed (migration 0010), the number KEDA scales the workers on, on a real migrated
PostgreSQL: it counts only work the asked queues and kinds can run now (due, within every limit),
its cost does not grow with delayed jobs, and deploy/scaler.sql's role may call it and read nothing."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors
from sqlalchemy.engine import make_url

from service.jobs import NewJob
from service.limits import Limit
from service.store import Store

pytestmark = pytest.mark.postgres_only(reason="the scaler is a PostgreSQL function: SQLite needs no KEDA")

SCALER_SQL = Path(__file__).resolve().parents[2] / "deploy" / "scaler.sql"


def slots_needed(url: str, queues: list[str], kinds: list[str]) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT jobq_slots_needed(%s, %s)", (queues, kinds)).fetchone()
    assert row is not None
    return int(row[0])


def running(store: Store, count: int, kind: str = "a", queue: str = "default", tenant: str = "default") -> None:
    store.enqueue_many([NewJob(kind=kind, queue=queue, tenant=tenant, priority=900) for _ in range(count)])
    assert len(store.claim("scaler-test", [queue], count, 300, kinds=[kind])) == count


def test_counts_due_and_running_jobs_of_the_asked_queues_and_kinds(
    pg_url: str, make_store: Callable[..., Store]
) -> None:
    store = make_store(pg_url)
    assert slots_needed(pg_url, ["default"], ["a", "b"]) == 0, "an empty queue needs no slot"
    running(store, 3)  # running: their workers must not be scaled away
    store.enqueue_many([NewJob(kind="a") for _ in range(6)] + [NewJob(kind="b") for _ in range(4)])
    store.enqueue_many([NewJob(kind="a", delay_seconds=3600) for _ in range(5)])  # not due for an hour
    store.enqueue_many([NewJob(kind="unknown") for _ in range(8)])  # no handler of the worker runs it
    store.enqueue_many([NewJob(kind="a", queue="ocr") for _ in range(7)])  # another worker's queue
    assert slots_needed(pg_url, ["default"], ["a", "b"]) == 3 + 6 + 4
    assert slots_needed(pg_url, ["default"], ["b"]) == 4
    assert slots_needed(pg_url, ["ocr"], ["a"]) == 7, "a worker of queue ocr is scaled on ocr's jobs"
    assert slots_needed(pg_url, ["default", "ocr"], ["a", "b"]) == 3 + 6 + 4 + 7


def test_a_full_scope_counts_only_its_room(pg_url: str, make_store: Callable[..., Store]) -> None:
    store = make_store(pg_url)
    store.set_limit(Limit("queue:default", concurrency=2))
    store.enqueue_many([NewJob(kind="a") for _ in range(40)])
    assert slots_needed(pg_url, ["default"], ["a"]) == 2, "40 due but room for 2"
    assert len(store.claim("scaler-test", ["default"], 40, 300)) == 2
    assert slots_needed(pg_url, ["default"], ["a"]) == 2, "the 2 running, no room for more"

    # Limits on another dimension: each tenant has room for one; a tenant's jobs share it.
    store.set_limit(Limit("tenant:*", concurrency=1))
    store.set_limit(Limit("queue:default", concurrency=100))
    store.enqueue_many([NewJob(kind="a", queue="q2", tenant=f"t{i}") for i in range(3) for _ in range(5)])
    assert slots_needed(pg_url, ["q2"], ["a"]) == 3, "three tenants of one slot each"

    # A rate limit: starts left in the current window.
    store.set_limit(Limit("kind:r", rate=3, per_seconds=3600.0))
    store.enqueue_many([NewJob(kind="r", queue="q3", tenant="default") for _ in range(10)])
    store.set_limit(Limit("tenant:*", concurrency=1000))
    assert slots_needed(pg_url, ["q3"], ["r"]) == 3


def explain_buffers(url: str) -> int:
    """Shared buffers EXPLAIN (ANALYZE, BUFFERS) counts for one call of the function, executing it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT jobq_slots_needed(ARRAY['default'], ARRAY['a'])")  # warm the catalog caches
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT jobq_slots_needed(ARRAY['default'], ARRAY['a'])"
        ).fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    node = plan[0]["Plan"]
    return int(node["Shared Hit Blocks"]) + int(node["Shared Read Blocks"])


def test_cost_does_not_grow_with_delayed_jobs(pg_url: str, make_store: Callable[..., Store]) -> None:
    store = make_store(pg_url)
    store.enqueue_many([NewJob(kind="a") for _ in range(20)])
    before = explain_buffers(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:  # 100,000 delayed jobs, as a backlog of retries
        conn.execute(
            "INSERT INTO jobs (id, kind, payload, state, run_after, created_at, updated_at)"
            " SELECT gen_random_uuid(), 'a', '{}', 'queued', now() + interval '1 day', now(), now()"
            " FROM generate_series(1, 100000)"
        )
        conn.execute("VACUUM ANALYZE jobs")
    after = explain_buffers(pg_url)
    assert slots_needed(pg_url, ["default"], ["a"]) == 20
    # A deeper index costs each descent a page or two; reading the delayed entries would cost 1,100.
    assert after - before < 20, f"{after} buffers with 100,000 delayed jobs (before them: {before})"


@contextmanager
def scaler_login(owner_url: str) -> Iterator[psycopg.Connection[Any]]:
    """deploy/scaler.sql applied, and a new login in jobq_scaler, as deploy/scaler.sql tells."""
    with psycopg.connect(owner_url, autocommit=True) as admin:
        admin.execute(SCALER_SQL.read_text())  # type: ignore[arg-type]  # our own script, no parameters
        admin.execute(SCALER_SQL.read_text())  # type: ignore[arg-type]  # idempotent
        name, password = f"jobq_test_keda_{secrets.token_hex(6)}", secrets.token_urlsafe(18)
        admin.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}' IN ROLE jobq_scaler")  # type: ignore[arg-type]
        try:
            url = make_url(owner_url).set(username=name, password=password).render_as_string(hide_password=False)
            with psycopg.connect(url, autocommit=True) as conn:
                yield conn
        finally:
            admin.execute(f"DROP ROLE IF EXISTS {name}")  # type: ignore[arg-type]


def test_the_scaler_role_calls_the_function_and_reads_no_table(pg_url: str, make_store: Callable[..., Store]) -> None:
    store = make_store(pg_url)
    store.enqueue_many([NewJob(kind="a") for _ in range(5)])
    with scaler_login(pg_url) as keda:
        row = keda.execute("SELECT jobq_slots_needed(ARRAY['default'], ARRAY['a'])").fetchone()
        assert row == (5,)
        for table in ("jobs", "api_tokens", "scope_counters", "job_results"):
            with pytest.raises(errors.InsufficientPrivilege):
                keda.execute(f"SELECT 1 FROM {table} LIMIT 1")  # type: ignore[arg-type]  # our names
        with pytest.raises(errors.InsufficientPrivilege):
            keda.execute("DELETE FROM jobs")
    with psycopg.connect(pg_url, autocommit=True) as owner:
        public = owner.execute(
            "SELECT has_function_privilege('public', 'jobq_slots_needed(text[], text[])', 'EXECUTE')"
        ).fetchone()
    assert public == (False,), "PUBLIC may not call it: only the scaler's role"
