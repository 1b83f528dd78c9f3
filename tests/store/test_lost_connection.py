"""A connection that dies under a statement (PostgreSQL): a read runs once more on a fresh
connection and answers; a write whose outcome nothing settles is not run again (StoreUnavailable,
as before); a pooled connection the server closed while idle is never used at all.

The statement is kept waiting by a lock another session holds, and its backend is terminated
while it waits (as a server restart ends it): deterministic, on the shared server, which is
never restarted (tests/api/test_database_restart.py restarts a private one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from service.errors import StoreUnavailable
from service.jobs import JobState, NewJob
from service.store import Store

pytestmark = pytest.mark.postgres_only(reason="connections, backends and pg_terminate_backend are PostgreSQL's")


def run_in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(call())
        except Exception as exc:  # the test inspects it
            outcome.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


def terminate_the_waiting_backend(admin: psycopg.Connection[Any]) -> None:
    """End the one session waiting for a lock on jobs (the store's statement)."""
    deadline = time.monotonic() + 10
    while True:
        pids = [
            row[0]
            for row in admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
        ]
        if pids:
            admin.execute("SELECT pg_terminate_backend(%s)", [pids[0]])
            return
        assert time.monotonic() < deadline, "the store's statement never waited for the lock"
        time.sleep(0.05)


def test_a_read_whose_connection_dies_under_it_answers_from_a_fresh_one(
    pg_url: str, make_store: Callable[..., Store]
) -> None:
    store = make_store(pg_url, pool_size=2)
    job = store.enqueue(NewJob(kind="k"))
    with psycopg.connect(pg_url, autocommit=True) as admin, psycopg.connect(pg_url) as holder:
        holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")  # every read of jobs waits
        thread, outcome = run_in_thread(lambda: store.get(job.id))
        terminate_the_waiting_backend(admin)
        time.sleep(0.3)  # the replay is waiting for the lock now, on a new connection
        holder.commit()
        thread.join(timeout=15)
    (answer,) = outcome
    assert not isinstance(answer, Exception), answer
    assert answer.id == job.id and answer.state is JobState.QUEUED


def test_a_write_nothing_settles_is_not_run_again(pg_url: str, make_store: Callable[..., Store]) -> None:
    store = make_store(pg_url, pool_size=2)
    job = store.enqueue(NewJob(kind="k"))
    with psycopg.connect(pg_url, autocommit=True) as admin, psycopg.connect(pg_url) as holder:
        holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        thread, outcome = run_in_thread(lambda: store.cancel(job.id))
        terminate_the_waiting_backend(admin)
        thread.join(timeout=15)
        holder.commit()
    (answer,) = outcome
    assert isinstance(answer, StoreUnavailable), answer
    assert store.get(job.id).state is JobState.QUEUED  # the cancel never ran: it was not replayed


def test_a_pooled_connection_the_server_closed_while_idle_is_not_used(
    pg_url: str, make_store: Callable[..., Store]
) -> None:
    store = make_store(pg_url, pool_size=1)
    job = store.enqueue(NewJob(kind="k"))
    with psycopg.connect(pg_url, autocommit=True) as admin:
        backends = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        assert backends, "the store's pool holds an idle connection"
        for (pid,) in backends:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    time.sleep(0.2)  # the server's goodbye reaches the idle sockets
    assert store.cancel(job.id).state is JobState.CANCELLED  # a write, sent on a fresh connection
