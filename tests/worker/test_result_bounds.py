"""A worker whose handler returns more than JOBQ_MAX_RESULT_BYTES: the attempt fails for good,
with an error naming the size and the setting (issue 26), on both stores."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.jobs import NewJob
from service.store import Store
from service.worker import App, JobContext
from tests.conftest import Database
from tests.worker.harness import wait_until
from tests.worker.test_worker_in_process import running_worker, state

LIMIT = 4_096


@pytest.fixture
def bounded(make_store: Callable[..., Store], store_url: str) -> Store:
    return make_store(store_url, max_result_bytes=LIMIT)


def test_a_result_over_the_bound_fails_the_attempt_for_good(bounded: Store, db: Database) -> None:
    app = App()
    app.register("huge", lambda ctx: {"text": "x" * LIMIT})
    app.register("small", lambda ctx: {"ok": True})
    huge, small = bounded.enqueue_many([NewJob(kind="huge", max_attempts=3), NewJob(kind="small")])

    with running_worker(bounded, app):
        wait_until(lambda: state(db, huge.id) == "failed" and state(db, small.id) == "succeeded", 20, what="outcomes")

    row = db.job(huge.id)
    assert row["attempts"] == 1  # not retried: the same code returns the same result
    assert f"over the limit of {LIMIT} (JOBQ_MAX_RESULT_BYTES)" in row["error"]
    assert f"is {LIMIT + 11} bytes" in row["error"]  # {"text":"…"}: 11 bytes around the text
    assert bounded.get_result(small.id) == {"ok": True}


def test_an_item_result_over_the_bound_fails_the_attempt_for_good(bounded: Store, db: Database) -> None:
    app = App()

    @app.handler("items")
    def items(ctx: JobContext) -> str:
        ctx.item_done(0, "fine")
        ctx.item_done(1, "y" * LIMIT)
        return "done"

    job = bounded.enqueue(NewJob(kind="items", max_attempts=3, total=2))
    with running_worker(bounded, app):
        wait_until(lambda: state(db, job.id) == "failed", 20, what="the job's failure")

    row = db.job(job.id)
    assert row["attempts"] == 1
    assert "the result of item 1 is" in row["error"] and "JOBQ_MAX_RESULT_BYTES" in row["error"]
