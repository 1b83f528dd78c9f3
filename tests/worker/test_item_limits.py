"""Item outcomes with a real worker (in this process) on both stores. max_item_failures: past
the limit the attempt is retried, the retry runs the failed items again, and after the last
attempt the job fails with an error that names how many items failed. And their cost: a job of
1,000 items writes its outcomes with its heartbeats and its completion, never one by one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from service.jobs import ItemQuery, ItemState, NewJob
from service.store import Store
from service.worker import App, JobContext, Worker, WorkerConfig
from tests.conftest import Database
from tests.worker.harness import wait_until


def run_until(store: Store, app: App, done: Callable[[], bool], flush_seconds: float = 0.5) -> Worker:
    worker = Worker(
        store, app, WorkerConfig(poll_seconds=0.1, lease_seconds=3.0, grace_seconds=1.0, flush_seconds=flush_seconds)
    )
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
    thread.start()
    try:
        wait_until(done, 30, what="the job to finish")
    finally:
        worker.shutdown()
        thread.join(20)
    return worker


def test_past_max_item_failures_the_job_is_retried_then_fails_naming_the_count(
    make_store: Callable[..., Store], store_url: str, db: Database
) -> None:
    store = make_store(store_url, retry_base_seconds=0.01)
    ran: list[tuple[int, int]] = []
    app = App()

    @app.handler("rows", max_item_failures=2)
    def rows(ctx: JobContext) -> Any:
        def one(n: int) -> int:
            ran.append((ctx.attempt, n))
            if n in (3, 4, 5):
                raise ValueError(f"row {n} is broken")
            return n

        return ctx.map(list(range(10)), one)

    job = store.enqueue(NewJob(kind="rows", max_attempts=2))
    run_until(store, app, lambda: db.job(job.id)["state"] == "failed")

    row = db.job(job.id)
    assert row["attempts"] == 2
    assert row["error"].startswith("TooManyItemFailures: 3 of 10 items failed, more than max_item_failures allows (2)")
    assert "item 3: ValueError: row 3 is broken" in row["error"]
    assert [a["outcome"] for a in db.attempts(job.id)] == ["failed", "failed"]
    # The first attempt stopped at the third failure; the retry skipped the ok items and ran the failed ones again.
    assert [n for attempt, n in ran if attempt == 1] == [0, 1, 2, 3, 4, 5]
    assert [n for attempt, n in ran if attempt == 2] == [3, 4, 5]
    status = store.get(job.id)
    assert (status.items_ok, status.items_failed) == (3, 3)
    failed = store.list_items(ItemQuery(job_id=job.id, state=ItemState.FAILED)).items
    assert [(i.index, i.attempt) for i in failed] == [(3, 2), (4, 2), (5, 2)]


def test_within_max_item_failures_the_job_succeeds_with_the_failures_kept(
    make_store: Callable[..., Store], store_url: str, db: Database
) -> None:
    store = make_store(store_url, retry_base_seconds=0.01)
    app = App()

    @app.handler("rows", max_item_failures=0.2)
    def rows(ctx: JobContext) -> Any:
        for index, n in ctx.enumerate(list(range(10))):
            with ctx.item(index) as item:
                if n in (2, 7):
                    raise KeyError(n)
                item.result = {"n": n}
        return "done"

    job = store.enqueue(NewJob(kind="rows", max_attempts=2))
    run_until(store, app, lambda: db.job(job.id)["state"] == "succeeded")

    status = store.get(job.id)
    assert (status.items_ok, status.items_failed, status.attempts, status.done) == (8, 2, 1, 10)
    assert [i.index for i in store.list_items(ItemQuery(job_id=job.id, state=ItemState.FAILED)).items] == [2, 7]


def test_a_thousand_items_are_written_with_the_heartbeats_not_one_by_one(
    make_store: Callable[..., Store], store_url: str, db: Database
) -> None:
    store = make_store(store_url)
    app = App()

    @app.handler("rows")
    def rows(ctx: JobContext) -> Any:
        def one(n: int) -> int:
            time.sleep(0.001)  # long enough for the heartbeats to carry outcomes while it runs
            if n % 100 == 7:
                raise ValueError(f"row {n} is broken")
            return n

        return len(ctx.map(list(range(1_000)), one))

    job = store.enqueue(NewJob(kind="rows"))
    worker = run_until(store, app, lambda: db.job(job.id)["state"] == "succeeded", flush_seconds=0.1)

    status = store.get(job.id)
    assert (status.items_ok, status.items_failed) == (990, 10)
    # Every write of a job's outcomes stamps them with one time (the database's, per statement
    # or transaction): the distinct times are the writes that carried outcomes.
    writes = db.scalar("SELECT count(DISTINCT finished_at) AS n FROM job_items WHERE job_id = %(id)s", id=job.id)
    heartbeats = worker.keeper.renewals
    print(f"\n1,000 items: {heartbeats} heartbeats, outcomes written in {writes} writes")
    assert 1 < writes <= heartbeats + 1, "the outcomes rode on the heartbeats and the completion"
    assert heartbeats < 100
