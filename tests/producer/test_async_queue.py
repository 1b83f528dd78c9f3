"""AsyncQueue: Queue's operations from asyncio, and the enqueue inside the caller's async transaction.

Its rules are Queue's (it validates through one), and on the caller's async connection it sends
the statements Queue sends (service.store.postgres.steps): each test here holds it to Queue's
answers, on both stores where Queue works on both, and to the caller's commit or rollback on
PostgreSQL, for every way an enqueue is sent (one statement, keyed, COPY, a workflow batch).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, create_async_engine

from service import App, AsyncQueue, NewJob, Queue, chain, group
from service.errors import IdempotencyConflict, InvalidInput, InvalidTransition, JobCancelled, JobFailed, JobNotFound
from service.jobs import JobState
from service.store.postgres.submit import COPY_FROM_JOBS
from tests.api.asgi import AsgiClient
from tests.conftest import Database
from tests.producer.test_queue import BAD_ENQUEUES
from tests.worker.test_worker_in_process import running_worker

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")

# Each way an enqueue is sent, as AsyncQueue.enqueue_many's argument: its own plan of steps.
BATCHES: dict[str, Callable[[int], list[dict[str, Any]]]] = {
    "one statement": lambda order: [{"kind": "ship", "payload": {"order": order}}],
    "keyed": lambda order: [{"kind": "ship", "payload": {"order": order}, "idempotency_key": f"order-{order}"}],
    "COPY": lambda order: [{"kind": "ship", "payload": {"order": order, "n": n}} for n in range(COPY_FROM_JOBS)],
    "workflow": lambda order: [
        {"kind": "ship", "payload": {"order": order}},
        {"kind": "notify", "payload": {"order": order}, "depends_on": [0]},
    ],
}


@pytest.fixture
def orders(pg_url: str) -> Iterator[Database]:
    """The application's own table beside jobq's, on the same database."""
    database = Database(pg_url)
    database.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    yield database
    database.close()


def async_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://")


@asynccontextmanager
async def callers_connection(url: str, how: str) -> AsyncIterator[Any]:
    """The caller's async connection, as an application holds it; its transaction is the test's."""
    if how == "psycopg":
        async with await psycopg.AsyncConnection.connect(url) as conn:
            yield conn
        return
    engine = create_async_engine(async_url(url))
    try:
        if how == "sqlalchemy connection":
            async with engine.connect() as sa_conn:
                yield sa_conn
        else:
            async with AsyncSession(engine) as session:
                yield session
    finally:
        await engine.dispose()


async def _execute(conn: Any, sql: str) -> None:
    if isinstance(conn, psycopg.AsyncConnection):
        await conn.execute(sql)
    else:
        await conn.execute(sqlalchemy.text(sql))


CONNECTIONS = ["psycopg", "sqlalchemy connection", "sqlalchemy session"]


@pytest.mark.parametrize("how", CONNECTIONS)
@pytest.mark.parametrize("batch", list(BATCHES))
def test_an_enqueue_in_the_callers_async_transaction_commits_or_rolls_back_with_it(
    pg_url: str, orders: Database, how: str, batch: str
) -> None:
    async def scenario() -> tuple[bool, list[Any]]:
        async with AsyncQueue(pg_url) as queue:
            # Rolled back: with the job as the transaction's first statement, then after the caller's own.
            for first in (True, False):
                async with callers_connection(pg_url, how) as conn:
                    if not first:
                        await _execute(conn, "INSERT INTO orders VALUES (1)")
                    await queue.enqueue_many(BATCHES[batch](1), connection=conn)
                    await conn.rollback()
            assert (orders.count("orders"), orders.count("jobs")) == (0, 0)
            async with callers_connection(pg_url, how) as conn:
                statuses = await queue.enqueue_many(BATCHES[batch](2), connection=conn)
                await _execute(conn, "INSERT INTO orders VALUES (2)")
                assert orders.count("jobs") == 0  # nobody sees it before the commit
                await conn.commit()
            return [await queue.get(status.id) for status in statuses] == statuses, statuses

    same, statuses = asyncio.run(scenario())
    assert same
    assert orders.count("orders") == 1 and orders.count("jobs") == len(BATCHES[batch](2)) == len(statuses)


def test_a_key_reused_in_the_callers_async_transaction_is_checked_and_the_transaction_goes_on(
    pg_url: str, orders: Database
) -> None:
    async def scenario() -> None:
        async with AsyncQueue(pg_url) as queue, await psycopg.AsyncConnection.connect(pg_url) as conn:
            first = await queue.enqueue("ship", {"order": 1}, connection=conn, idempotency_key="order-1")
            assert await queue.enqueue("ship", {"order": 1}, connection=conn, idempotency_key="order-1") == first
            with pytest.raises(IdempotencyConflict, match="different payload"):
                await queue.enqueue("ship", {"order": 2}, connection=conn, idempotency_key="order-1")
            await conn.execute("INSERT INTO orders VALUES (1)")  # the refused enqueue's savepoint is gone
            await conn.commit()

    asyncio.run(scenario())
    assert orders.count("orders") == 1
    assert [r["payload"] for r in orders.rows("SELECT payload FROM jobs")] == [{"order": 1}]


def test_each_queue_refuses_the_other_kind_of_connection(pg_url: str, orders: Database) -> None:
    async def scenario() -> None:
        async with AsyncQueue(pg_url) as queue, await psycopg.AsyncConnection.connect(pg_url) as aconn:
            with psycopg.connect(pg_url) as conn:
                with pytest.raises(InvalidInput, match="a synchronous one goes to Queue"):
                    await queue.enqueue("ship", connection=conn)
                with pytest.raises(InvalidInput, match="goes to AsyncQueue"):
                    queue.sync.enqueue("ship", connection=aconn)
            with pytest.raises(InvalidInput, match="not a object"):
                await queue.enqueue("ship", connection=object())
            engine = create_async_engine(async_url(pg_url))
            try:
                async with engine.connect() as sa_conn:
                    assert isinstance(sa_conn, AsyncConnection)
                    with pytest.raises(InvalidInput, match="goes to AsyncQueue"):
                        queue.sync.enqueue("ship", connection=sa_conn)
            finally:
                await engine.dispose()

    asyncio.run(scenario())
    assert orders.count("jobs") == 0


def test_bad_input_is_refused_by_the_same_names_as_queue_and_writes_nothing(store_url: str, db: Database) -> None:
    async def scenario() -> None:
        async with AsyncQueue(store_url) as queue:
            for kind, payload, options, error in BAD_ENQUEUES:
                with pytest.raises(error):
                    await queue.enqueue(kind, payload, **options)
            with pytest.raises(InvalidInput):
                await queue.enqueue_many([NewJob(kind="fine"), {"kind": "bad", "priority": -1}])
            with pytest.raises(InvalidInput, match="needs PostgreSQL" if db.dialect == "sqlite" else "not a object"):
                await queue.enqueue("k", connection=object())
            with pytest.raises(InvalidInput):
                await queue.get("not-a-uuid")
            with pytest.raises(JobNotFound):
                await queue.cancel("00000000-0000-0000-0000-000000000007")

    asyncio.run(scenario())
    assert db.count("jobs") == 0


def test_enqueue_read_wait_cancel_and_a_workflow_as_queue_answers_them(store_url: str) -> None:
    app = App()
    app.register("ok", lambda ctx: {"echo": ctx.payload["x"]})
    app.register("sum", lambda ctx: {"sum": sum(r["echo"] for r in ctx.parent_results().values())})

    @app.handler("bad", max_attempts=1)
    def bad(ctx: object) -> None:
        raise ValueError("no good")

    async def scenario(queue: AsyncQueue) -> None:
        ok = await queue.enqueue("ok", {"x": 3}, queue="default", priority=5)
        assert (ok.state, ok.priority) == (JobState.QUEUED, 5)
        assert (await queue.wait(ok.id, timeout=20)).state is JobState.SUCCEEDED
        assert await queue.result(ok.id) == {"echo": 3}
        with pytest.raises(JobFailed, match="no good"):
            await queue.wait((await queue.enqueue("bad")).id, timeout=20)
        later = await queue.enqueue("ok", {"x": 1}, delay_seconds=3600)
        with pytest.raises(TimeoutError, match="still queued"):
            await queue.wait(later.id, timeout=0.3)
        with pytest.raises(InvalidTransition):
            await queue.result(later.id)
        assert (await queue.cancel(later.id)).state is JobState.CANCELLED
        with pytest.raises(JobCancelled):
            await queue.wait(later.id, timeout=5)
        flow = await queue.enqueue_workflow(
            chain(group([NewJob("ok", {"x": x}) for x in (1, 2, 3)]), NewJob("sum")), connection=None
        )
        assert flow[-1].parents_pending == 3
        await queue.wait(flow[-1].id, timeout=30)
        assert await queue.result(flow[-1].id) == {"sum": 6}
        page = await queue.list(kind="ok", limit=2)
        assert len(page.items) == 2 and page.next_after_id is not None
        assert [s.id for s in (await queue.list(state="cancelled")).items] == [later.id]

    with Queue(store_url) as sync, running_worker(sync.store, app, concurrency=2):
        asyncio.run(_with(AsyncQueue(store=sync.store), scenario))


async def _with(queue: AsyncQueue, scenario: Callable[[AsyncQueue], Awaitable[None]]) -> None:
    async with queue:
        await scenario(queue)


def test_a_wait_does_not_hold_the_event_loop(store_url: str) -> None:
    """Many waits at once on one loop, none finishing, while the loop goes on ticking."""

    async def scenario() -> int:
        async with AsyncQueue(store_url) as queue:
            job = await queue.enqueue("nobody-runs-this")
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.01)

            tick = asyncio.create_task(ticker())
            waits = [queue.wait(job.id, timeout=0.5) for _ in range(50)]
            results = await asyncio.gather(*waits, return_exceptions=True)
            tick.cancel()
            assert all(isinstance(r, TimeoutError) for r in results)
            return ticks

    started = time.monotonic()
    assert asyncio.run(scenario()) >= 20  # the loop ran on while fifty waits waited
    assert time.monotonic() - started < 10


# -- the README's example ------------------------------------------------------------------


def asyncio_example() -> str:
    start = README.index("\n### From asyncio: `AsyncQueue`\n")
    end = README.index("\n### ", start + 5)
    [block] = re.findall(r"^```python\n(.*?)^```$", README[start:end], flags=re.MULTILINE | re.DOTALL)
    return block


def test_the_readme_fastapi_example_commits_the_order_and_its_job_together(
    pg_url: str, orders: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBQ_DATABASE_URL", pg_url)
    namespace: dict[str, Any] = {"__name__": "orders"}
    exec(compile(asyncio_example(), "README.md#from-asyncio", "exec"), namespace)  # noqa: S102 - our own README
    app = namespace["app"]

    async def scenario() -> None:
        async with app.router.lifespan_context(app):
            client = AsgiClient(app)
            placed = await client.post("/orders/7", b"")
            assert placed.status == 202, placed.body
            job_id = json.loads(placed.body)["job_id"]
            assert json.loads((await client.get(f"/jobs/{job_id}")).body) == {"state": "queued"}
            # The same order again: its insert is refused, and the transaction writes nothing.
            assert (await client.post("/orders/7", b"")).status == 500

    asyncio.run(scenario())
    assert orders.count("orders") == 1
    assert [r["payload"] for r in orders.rows("SELECT payload FROM jobs")] == [{"invoice_id": 7}]
