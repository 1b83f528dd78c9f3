"""deploy/analysts.sql: the jobq_analyst role reads the three views and nothing else.

Run against a fresh migrated PostgreSQL database with a little real history
(a job that ran and succeeded, an API token), as a login role that is a member
of jobq_analyst, the way docs/ANALYSTS.md tells an administrator to set it up.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors
from sqlalchemy.engine import make_url

from service.jobs import Completion, ItemOutcome, ItemState
from service.maintenance.rollup import BUCKET_BOUNDS, BUCKET_SECONDS
from service.store.migrate import downgrade, upgrade
from tests.analysts.roles import analyst_login, apply_role_script
from tests.conftest import PostgresServer, build_store
from tests.store.builders import claim_one, new_job

TABLES = [
    "jobs", "job_results", "job_attempts", "job_replays", "job_items", "workers", "api_tokens", "alembic_version",
    "job_daily_rollup", "job_daily_histogram", "rollup_watermark", "console_sessions", "console_audit", "job_edges",
]  # fmt: skip
VIEWS = [
    "job_history", "attempt_history", "job_item_history", "daily_jobs", "daily_histogram", "daily_queue_wait",
    "daily_run_time", "job_dependencies",
]  # fmt: skip
TOKEN_HASH = hashlib.sha256(b"jobq-test-token").hexdigest()


@pytest.fixture(scope="module")
def seeded(postgres_server: PostgresServer, pg_template: str) -> Iterator[str]:
    """One migrated database for the module (every test here only reads, or fails to write)."""
    name = postgres_server.new_name("analysts_role")
    url = postgres_server.create_database(name, template=pg_template)
    store = build_store(url)
    try:
        store.enqueue(new_job("summarize", tenant="acme"))
        claimed = claim_one(store)
        store.complete_many(
            [
                Completion(
                    claimed.lease,
                    {"summary": "short"},
                    items=(ItemOutcome(0, ItemState.FAILED, error="ValueError: too long"),),
                )
            ]
        )
        store.create_token("acme", TOKEN_HASH, name="ci")
        store.fold_rollup(BUCKET_BOUNDS, BUCKET_SECONDS, settle_seconds=0.0)  # the daily rollup, at once
    finally:
        store.close()
    yield url
    postgres_server.drop_database(name)


@pytest.fixture(scope="module")
def analyst(seeded: str) -> Iterator[psycopg.Connection[Any]]:
    apply_role_script(seeded)
    apply_role_script(seeded)  # idempotent: a second run changes nothing and fails on nothing
    with analyst_login(seeded) as (_name, conn):
        yield conn


def test_the_analyst_reads_the_views(analyst: psycopg.Connection[Any]):
    [(kind, state, result)] = analyst.execute("SELECT kind, state, result FROM job_history").fetchall()
    assert (kind, state, result) == ("summarize", "succeeded", {"summary": "short"})
    [(outcome, worker)] = analyst.execute("SELECT outcome, worker FROM attempt_history").fetchall()
    assert (outcome, worker) == ("succeeded", "worker-a")
    [(kind, index, state, error)] = analyst.execute(
        "SELECT kind, item_index, state, error FROM job_item_history"
    ).fetchall()
    assert (kind, index, state, error) == ("summarize", 0, "failed", "ValueError: too long")


def test_the_analyst_reads_the_daily_rollup(analyst: psycopg.Connection[Any]):
    [(tenant, kind, finished, succeeded)] = analyst.execute(
        "SELECT tenant, kind, finished, succeeded FROM daily_jobs"
    ).fetchall()
    assert (tenant, kind, finished, succeeded) == ("acme", "summarize", 1, 1)
    [(queue, jobs)] = analyst.execute("SELECT queue, jobs FROM daily_queue_wait").fetchall()
    assert (queue, jobs) == ("default", 1)
    [(kind, jobs)] = analyst.execute("SELECT kind, jobs FROM daily_run_time").fetchall()
    assert (kind, jobs) == ("summarize", 1)
    assert analyst.execute("SELECT sum(jobs) FROM daily_histogram").fetchall() == [(2,)]  # its run and its wait


@pytest.mark.parametrize("table", TABLES)
def test_the_analyst_cannot_read_a_table(analyst: psycopg.Connection[Any], table: str):
    with pytest.raises(errors.InsufficientPrivilege):
        analyst.execute(f"SELECT * FROM {table}")  # type: ignore[arg-type]  # names are ours


def test_the_analyst_never_sees_a_token_hash(analyst: psycopg.Connection[Any]):
    for query in (
        "SELECT token_hash FROM api_tokens",
        "SELECT count(*) FROM api_tokens WHERE token_hash LIKE 'a%'",
        "SELECT tenant FROM api_tokens",
    ):
        with pytest.raises(errors.InsufficientPrivilege):
            analyst.execute(query)  # type: ignore[arg-type]
    # Nothing in the views leads there either.
    columns = {
        name
        for (name,) in analyst.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ANY(%s)", [VIEWS]
        )
    }
    assert not {"token_hash", "payload", "checkpoint", "lease_owner"} & columns


WRITES = [
    (
        "INSERT INTO jobs (id, kind, payload, run_after, created_at, updated_at)"
        " VALUES (gen_random_uuid(), 'x', '{}', now(), now(), now())"
    ),
    "UPDATE jobs SET state = 'failed', error = 'x'",
    "DELETE FROM jobs",
    "INSERT INTO api_tokens (id, tenant, token_hash, created_at) VALUES (gen_random_uuid(), 'evil', 'h', now())",
    "UPDATE api_tokens SET revoked_at = NULL",
    "DELETE FROM api_tokens",
    "INSERT INTO job_results (id, job_id, body, created_at) SELECT gen_random_uuid(), id, '{}', now() FROM jobs",
    "UPDATE job_results SET body = '{}'",
    "DELETE FROM job_results",
    "UPDATE job_attempts SET outcome = 'failed'",
    "DELETE FROM job_replays",
    "UPDATE job_items SET state = 'ok'",
    "TRUNCATE jobs CASCADE",
    "SELECT nextval('job_attempts_id_seq')",
]


@pytest.mark.parametrize("statement", WRITES, ids=lambda s: " ".join(s.split()[:3]))
def test_the_analyst_cannot_write(analyst: psycopg.Connection[Any], statement: str):
    with pytest.raises(errors.InsufficientPrivilege):
        analyst.execute(statement)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO job_history (job_id) VALUES (gen_random_uuid())",
        "UPDATE job_history SET state = 'failed'",
        "DELETE FROM job_history",
        "INSERT INTO attempt_history (attempt_id) VALUES (1)",
        "UPDATE attempt_history SET outcome = 'failed'",
        "DELETE FROM attempt_history",
        "INSERT INTO job_item_history (item_index) VALUES (1)",
        "UPDATE job_item_history SET state = 'ok'",
        "DELETE FROM job_item_history",
    ],
    ids=lambda s: " ".join(s.split()[:3]),
)
def test_the_analyst_cannot_write_through_the_views(analyst: psycopg.Connection[Any], statement: str):
    # Two locks on this door: the views are not updatable (joins), which PostgreSQL
    # reports before it checks privileges; and the role holds no write privilege on
    # them, which would still stop it if a view ever became updatable.
    with pytest.raises((errors.InsufficientPrivilege, errors.ObjectNotInPrerequisiteState)):
        analyst.execute(statement)  # type: ignore[arg-type]
    view = statement.split()[2] if statement.startswith(("INSERT", "DELETE")) else statement.split()[1]
    for privilege in ("INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"):
        [(allowed,)] = analyst.execute("SELECT has_table_privilege(%s, %s)", [view, privilege]).fetchall()
        assert allowed is False, f"{privilege} on {view}"


def test_the_analyst_cannot_create_objects(analyst: psycopg.Connection[Any]):
    if analyst.info.server_version < 150000:
        pytest.skip("before PostgreSQL 15, PUBLIC may create in schema public unless an administrator revoked it")
    with pytest.raises(errors.InsufficientPrivilege):
        analyst.execute("CREATE TABLE stolen AS SELECT * FROM job_history")


def test_the_group_role_cannot_log_in_by_itself(seeded: str):
    apply_role_script(seeded)
    url = make_url(seeded).set(username="jobq_analyst", password="anything").render_as_string(hide_password=False)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=10).close()


def test_running_the_script_twice_grants_the_same(seeded: str):
    def grants() -> list[tuple[Any, ...]]:
        with psycopg.connect(seeded) as conn:
            return conn.execute(
                "SELECT table_name, grantee, privilege_type FROM information_schema.role_table_grants"
                " WHERE table_schema = current_schema() AND grantee IN ('jobq_analyst', 'PUBLIC')"
                " ORDER BY 1, 2, 3"
            ).fetchall()

    apply_role_script(seeded)
    once = grants()
    apply_role_script(seeded)
    assert (
        grants()
        == once
        == [
            ("attempt_history", "jobq_analyst", "SELECT"),
            ("daily_histogram", "jobq_analyst", "SELECT"),
            ("daily_jobs", "jobq_analyst", "SELECT"),
            ("daily_queue_wait", "jobq_analyst", "SELECT"),
            ("daily_run_time", "jobq_analyst", "SELECT"),
            ("job_dependencies", "jobq_analyst", "SELECT"),
            ("job_history", "jobq_analyst", "SELECT"),
            ("job_item_history", "jobq_analyst", "SELECT"),
        ]
    )


def test_the_analyst_keeps_reading_job_history_across_migration_0016_down_and_up(
    postgres_server: PostgresServer, pg_template: str
):
    """0016 appends workflow_id to job_history in place (the grant stays); its downgrade must
    recreate the view, and gives the role's grant back."""
    name = postgres_server.new_name("analysts_0016")
    url = postgres_server.create_database(name, template=pg_template)
    try:
        apply_role_script(url)
        for step in (lambda: downgrade(url, "0015"), lambda: upgrade(url)):
            step()
            with analyst_login(url) as (_name, conn):
                assert conn.execute("SELECT count(*) FROM job_history").fetchone() == (0,)
        with analyst_login(url) as (_name, conn):
            assert conn.execute("SELECT workflow_id FROM job_history").fetchall() == []
    finally:
        postgres_server.drop_database(name)
