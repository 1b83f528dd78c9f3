"""Transactional enqueue on PostgreSQL: the job and the caller's rows commit or roll back together.

The connection is the caller's own (psycopg, or SQLAlchemy's Connection and Session
on psycopg); the job is invisible to workers until the commit, and the NOTIFY that
wakes them is delivered at the commit, never on a rollback.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy
from sqlalchemy.orm import Session

from service import App, Queue
from service.errors import IdempotencyConflict
from service.jobs import JobState
from service.store.base import JOBS_QUEUED
from service.store.postgres.submit import COPY_FROM_JOBS
from tests.conftest import Database
from tests.worker.test_worker_in_process import running_worker


@pytest.fixture
def queue(pg_url: str) -> Iterator[Queue]:
    with Queue(pg_url) as opened:
        yield opened


@pytest.fixture
def orders(pg_url: str) -> Iterator[Database]:
    """The application's own table beside jobq's, on the same database."""
    database = Database(pg_url)
    database.execute("CREATE TABLE orders (id int PRIMARY KEY, total int NOT NULL)")
    yield database
    database.close()


def test_commit_makes_the_job_run(queue: Queue, orders: Database) -> None:
    app = App()
    app.register("ship", lambda ctx: {"shipped": ctx.payload["order"]})
    with running_worker(queue.store, app), psycopg.connect(queue.settings.database_url) as conn:
        conn.execute("INSERT INTO orders VALUES (1, 100)")
        job = queue.enqueue("ship", {"order": 1}, connection=conn)
        assert orders.count("jobs") == 0  # not visible to anyone before the commit
        conn.commit()
        assert queue.wait(job.id, timeout=20).state is JobState.SUCCEEDED
        assert queue.result(job.id) == {"shipped": 1}


def test_rollback_leaves_no_job_and_wakes_nobody(queue: Queue, orders: Database) -> None:
    listener = queue.store.listen([JOBS_QUEUED])
    try:
        with psycopg.connect(queue.settings.database_url) as conn:
            conn.execute("INSERT INTO orders VALUES (1, 100)")
            queue.enqueue("ship", {"order": 1}, connection=conn)
            conn.rollback()
        assert orders.count("orders") == 0 and orders.count("jobs") == 0
        assert [n for n in listener.wait(1.0) if n.payload != "*"] == []  # no wake-up was sent
        with psycopg.connect(queue.settings.database_url) as conn:
            queue.enqueue("ship", {"order": 2}, connection=conn)
            conn.commit()
        woken = [n for n in listener.wait(5.0) if n.payload != "*"]
        assert [(n.channel, n.payload) for n in woken] == [(JOBS_QUEUED, "default")]  # the commit sends it
    finally:
        listener.close()


@pytest.mark.parametrize("size", [2, COPY_FROM_JOBS], ids=["ENQUEUE_JOBS", "COPY_JOBS"])
def test_a_batch_commits_or_rolls_back_with_the_callers_transaction(queue: Queue, orders: Database, size: int) -> None:
    jobs = [{"kind": "ship", "payload": {"order": i}, "queue": ("default", "bulk")[i % 2]} for i in range(size)]
    listener = queue.store.listen([JOBS_QUEUED])
    try:
        with psycopg.connect(queue.settings.database_url) as conn:
            conn.execute("INSERT INTO orders VALUES (1, 100)")
            queue.enqueue_many(jobs, connection=conn)
            conn.rollback()
        assert orders.count("orders") == 0 and orders.count("jobs") == 0
        assert [n for n in listener.wait(1.0) if n.payload != "*"] == []
        with psycopg.connect(queue.settings.database_url) as conn:
            conn.execute("INSERT INTO orders VALUES (1, 100)")
            statuses = queue.enqueue_many(jobs, connection=conn)
            assert orders.count("jobs") == 0
            conn.commit()
        assert orders.count("orders") == 1 and orders.count("jobs") == size
        assert [queue.get(status.id) for status in statuses] == statuses
        woken = [n for n in listener.wait(5.0) if n.payload != "*"]
        assert [(n.channel, n.payload) for n in woken] == [(JOBS_QUEUED, "bulk,default")]  # one, at the commit
    finally:
        listener.close()


@pytest.mark.parametrize("size", [2, COPY_FROM_JOBS], ids=["ENQUEUE_JOBS", "COPY_JOBS"])
def test_a_batch_on_an_autocommit_connection_commits_by_itself(queue: Queue, orders: Database, size: int) -> None:
    with psycopg.connect(queue.settings.database_url, autocommit=True) as conn:
        statuses = queue.enqueue_many([{"kind": "ship", "payload": {"order": i}} for i in range(size)], connection=conn)
        assert orders.count("jobs") == size
        assert conn.info.transaction_status is psycopg.pq.TransactionStatus.IDLE
    assert [queue.get(status.id) for status in statuses] == statuses


def test_sqlalchemy_connection_and_session(queue: Queue, orders: Database) -> None:
    engine = sqlalchemy.create_engine(queue.settings.database_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:  # nothing executed yet: the enqueue begins the transaction
            job = queue.enqueue("ship", {"order": 1}, connection=conn, idempotency_key="order-1")
            conn.execute(sqlalchemy.text("INSERT INTO orders VALUES (1, 100)"))
            conn.commit()
        with Session(engine) as session:
            session.execute(sqlalchemy.text("INSERT INTO orders VALUES (2, 200)"))
            queue.enqueue("ship", {"order": 2}, connection=session)
            session.rollback()
        with Session(engine) as session, session.begin():
            session.execute(sqlalchemy.text("INSERT INTO orders VALUES (3, 300)"))
            queue.enqueue_many([{"kind": "ship", "payload": {"order": 3}}], connection=session)
        # The same key in a later transaction names the committed job, as on the API.
        with engine.connect() as conn:
            assert queue.enqueue("ship", {"order": 1}, connection=conn, idempotency_key="order-1").id == job.id
            conn.commit()
    finally:
        engine.dispose()
    assert [r["id"] for r in orders.rows("SELECT id FROM orders ORDER BY id")] == [1, 3]
    assert sorted(r["payload"]["order"] for r in orders.rows("SELECT payload FROM jobs")) == [1, 3]


def test_a_key_reused_in_the_callers_transaction_is_checked_and_a_conflict_leaves_it_going_on(
    queue: Queue, orders: Database
) -> None:
    # The job the key names is not committed yet: the store reads it back in the caller's own
    # transaction, so the rule holds there as it does everywhere (before, the library's own read,
    # on another connection, found no job and let any second job through).
    with psycopg.connect(queue.settings.database_url) as conn:
        first = queue.enqueue("ship", {"order": 1}, connection=conn, idempotency_key="order-1")
        assert queue.enqueue("ship", {"order": 1}, connection=conn, idempotency_key="order-1") == first
        with pytest.raises(IdempotencyConflict, match=f"already used for job {first.id} with a different payload"):
            queue.enqueue_many(
                [
                    {"kind": "ship", "payload": {"order": 9}},
                    {"kind": "ship", "payload": {"order": 2}, "idempotency_key": "order-1"},
                ],
                connection=conn,
            )
        conn.execute(
            "INSERT INTO orders VALUES (1, 100)"
        )  # the transaction goes on: the refused batch's savepoint is gone
        conn.commit()
    assert orders.count("orders") == 1
    assert [r["payload"] for r in orders.rows("SELECT payload FROM jobs")] == [{"order": 1}]


def test_the_business_row_and_its_job_commit_together_under_a_concurrent_claim(queue: Queue, orders: Database) -> None:
    """A claimer polling all along never gets the job before the commit, and when it gets
    it the order it names is already there: they became visible in the same instant."""
    claimed: list[tuple[float, int, int]] = []  # (when, order id, orders rows seen at the claim)
    stop = threading.Event()
    committed_at: list[float] = []

    def claimer() -> None:
        reader = Database(queue.settings.database_url)
        try:
            while not stop.is_set() and not claimed:
                for job in queue.store.claim("claimer", ["default"], 1, 30):
                    order = job.payload["order"]
                    seen = reader.count("orders", "id = %(id)s", id=order)
                    claimed.append((time.monotonic(), order, seen))
                time.sleep(0.005)
        finally:
            reader.close()

    thread = threading.Thread(target=claimer, daemon=True)
    thread.start()
    with psycopg.connect(queue.settings.database_url) as conn:
        conn.execute("INSERT INTO orders VALUES (7, 700)")
        queue.enqueue("ship", {"order": 7}, connection=conn)
        time.sleep(0.5)  # the claimer polls about 100 times meanwhile
        assert not claimed
        committed_at.append(time.monotonic())
        conn.commit()
    thread.join(10)
    stop.set()
    assert len(claimed) == 1
    when, order, seen = claimed[0]
    assert when >= committed_at[0] and order == 7 and seen == 1


def test_a_keyed_enqueue_as_the_first_statement_rolls_back_with_the_callers_transaction(
    queue: Queue, orders: Database
) -> None:
    # psycopg's transaction() on an idle connection that is not autocommit opens a transaction of
    # its own and commits it at the block's end: the keyed insert, run first, outlived the caller's
    # rollback. The enqueue now opens the caller's transaction first and runs in a savepoint of it.
    with psycopg.connect(queue.settings.database_url) as conn:
        queue.enqueue("ship", {"order": 1}, connection=conn, idempotency_key="order-1")
        conn.rollback()
    engine = sqlalchemy.create_engine(queue.settings.database_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as sa_conn:
            queue.enqueue("ship", {"order": 2}, connection=sa_conn, idempotency_key="order-2")
            sa_conn.rollback()
        with Session(engine) as session:
            queue.enqueue("ship", {"order": 3}, connection=session, idempotency_key="order-3")
            session.rollback()
    finally:
        engine.dispose()
    assert orders.count("jobs") == 0
    with psycopg.connect(queue.settings.database_url) as conn:
        job = queue.enqueue("ship", {"order": 4}, connection=conn, idempotency_key="order-4")
        assert conn.info.transaction_status is psycopg.pq.TransactionStatus.INTRANS  # the caller's, still open
        conn.commit()
    assert queue.get(job.id).state is JobState.QUEUED
