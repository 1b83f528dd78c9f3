"""deploy/analysts.sql's guard rails, on real PostgreSQL: every login of jobq_analyst gets a
statement_timeout and an idle_in_transaction_session_timeout in jobq's database, so an analyst's
forgotten transaction or runaway query cannot hold back vacuum of the queue's tables for long;
the values have defaults, can be chosen per run and stay chosen; the queue's own roles get none.

The timeouts are set to a second here (the way docs/ANALYSTS.md says to choose them), so each
test waits a second or two, not a minute.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
import pytest
from psycopg import errors
from sqlalchemy.engine import make_url

from tests.analysts.roles import ROLE_SCRIPT, analyst_role, apply_role_script
from tests.conftest import PostgresServer

STATEMENT = "jobq.analyst_statement_timeout"
IDLE = "jobq.analyst_idle_in_transaction_timeout"
FAST = {STATEMENT: "1s", IDLE: "1s"}


def role_settings(url: str, role: str) -> dict[str, str]:
    """The role's settings in this database (what ALTER ROLE ... IN DATABASE recorded)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT config FROM pg_db_role_setting, unnest(setconfig) AS config"
            " WHERE setrole = to_regrole(%s) AND setdatabase = (SELECT oid FROM pg_database"
            " WHERE datname = current_database())",
            [role],
        ).fetchall()
    return dict(config.split("=", 1) for (config,) in rows)


def wait_until(condition: Callable[[], bool], seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def backend_alive(url: str, pid: int) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone() == (1,)


@contextmanager
def queue_role(url: str) -> Iterator[tuple[str, str]]:
    """A login like the application's: it writes jobq's tables, and someone made it a member of
    jobq_analyst too."""
    name = f"jobq_test_app_{secrets.token_hex(6)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN IN ROLE jobq_analyst")  # type: ignore[arg-type]  # our name
        admin.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON jobs TO {name}")  # type: ignore[arg-type]
        try:
            yield name, make_url(url).set(username=name).render_as_string(hide_password=False)
        finally:
            admin.execute(f"REVOKE ALL ON jobs FROM {name}")  # type: ignore[arg-type]
            admin.execute(f"DROP ROLE IF EXISTS {name}")  # type: ignore[arg-type]


def test_an_analyst_session_left_idle_in_a_transaction_is_ended(pg_url: str) -> None:
    with analyst_role(pg_url) as (_name, login):
        apply_role_script(pg_url, FAST)
        with psycopg.connect(login) as analyst, psycopg.connect(pg_url) as owner:
            analyst.execute("SELECT count(*) FROM job_history")  # BEGIN, then nothing: a notebook's cell
            owner.execute("SELECT count(*) FROM jobs")  # the queue's own role, idle in a transaction as long
            pid = analyst.info.backend_pid

            assert wait_until(lambda: not backend_alive(pg_url, pid)), "the idle analyst session was not ended"
            with pytest.raises(errors.IdleInTransactionSessionTimeout):
                analyst.execute("SELECT 1")
            assert owner.execute("SELECT count(*) FROM jobs").fetchone() == (0,)  # still in its transaction


def test_an_analysts_long_statement_is_cancelled(pg_url: str) -> None:
    with analyst_role(pg_url) as (_name, login):
        apply_role_script(pg_url, FAST)
        with psycopg.connect(login, autocommit=True) as analyst, psycopg.connect(pg_url, autocommit=True) as owner:
            started = time.monotonic()
            with pytest.raises(errors.QueryCanceled, match="statement timeout"):
                analyst.execute("SELECT pg_sleep(10), count(*) FROM job_history")
            assert time.monotonic() - started < 8
            assert analyst.execute("SELECT count(*) FROM job_history").fetchone() == (0,)  # the session goes on
            owner.execute("SELECT pg_sleep(1.5)")  # the queue's role: no timeout


def test_the_guard_rails_have_defaults_and_chosen_values_stay(pg_url: str) -> None:
    with analyst_role(pg_url) as (alice, _):
        apply_role_script(pg_url)
        assert role_settings(pg_url, alice) == {
            "statement_timeout": "60s",
            "idle_in_transaction_session_timeout": "30s",
        }

        apply_role_script(pg_url, {STATEMENT: "2min"})
        assert role_settings(pg_url, alice) == {
            "statement_timeout": "2min",
            "idle_in_transaction_session_timeout": "30s",
        }
        assert role_settings(pg_url, "jobq_analyst") == role_settings(pg_url, alice)  # the policy, recorded

        with analyst_role(pg_url) as (bob, _):  # a login added later, the script run again as its header says
            apply_role_script(pg_url)
            assert role_settings(pg_url, bob) == role_settings(pg_url, alice) == {
                "statement_timeout": "2min", "idle_in_transaction_session_timeout": "30s",
            }  # fmt: skip


@pytest.mark.parametrize(
    "settings", [{STATEMENT: "soon"}, {IDLE: "-1s"}, {STATEMENT: "5min", IDLE: "a while"}], ids=str
)
def test_a_value_postgresql_refuses_changes_nothing(pg_url: str, settings: dict[str, str]) -> None:
    with analyst_role(pg_url) as (alice, _):
        apply_role_script(pg_url, FAST)
        with pytest.raises(errors.InvalidParameterValue):
            apply_role_script(pg_url, settings)
        assert role_settings(pg_url, alice) == {"statement_timeout": "1s", "idle_in_transaction_session_timeout": "1s"}
        assert role_settings(pg_url, "jobq_analyst") == role_settings(pg_url, alice)


def test_the_queues_own_roles_get_no_guard_rails(pg_url: str) -> None:
    with analyst_role(pg_url) as (alice, _), queue_role(pg_url) as (app, app_login):
        notices: list[str] = []
        with psycopg.connect(pg_url, autocommit=True) as owner:
            owner.add_notice_handler(lambda notice: notices.append(notice.message_primary or ""))
            owner.execute("SELECT set_config(%s, '1s', false)", [STATEMENT])
            owner.execute(ROLE_SCRIPT.read_text())  # type: ignore[arg-type]  # as apply_role_script runs it
            [(owner_name,)] = owner.execute("SELECT current_user").fetchall()

        assert role_settings(pg_url, alice)["statement_timeout"] == "1s"
        assert role_settings(pg_url, app) == {}  # a member, but it writes the queue
        assert role_settings(pg_url, owner_name) == {}  # the tables' owner, who ran the script
        assert f"role {app} can write jobq's tables: no guard rails set on it" in notices
        for url in (pg_url, app_login):
            with psycopg.connect(url, autocommit=True) as conn:
                settings = conn.execute(
                    "SELECT current_setting('statement_timeout'), current_setting('idle_in_transaction_session_timeout')"
                ).fetchone()
                assert settings == ("0", "0"), url


def test_the_guard_rails_hold_in_jobqs_database_only(pg_url: str, postgres_server: PostgresServer) -> None:
    with analyst_role(pg_url) as (_alice, login):
        apply_role_script(pg_url, FAST)
        elsewhere = make_url(login).set(database=make_url(postgres_server.admin_url).database)
        with psycopg.connect(elsewhere.render_as_string(hide_password=False), autocommit=True) as conn:
            assert conn.execute("SELECT current_setting('statement_timeout')").fetchone() == ("0",)
        with psycopg.connect(login, autocommit=True) as conn:
            assert conn.execute("SELECT current_setting('statement_timeout')").fetchone() == ("1s",)
