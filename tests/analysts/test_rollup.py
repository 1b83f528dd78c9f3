"""The daily rollup on both stores: jobs driven through the store with a pinned clock,
folded by service.maintenance.rollup, read back through daily_jobs, daily_queue_wait and
daily_run_time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from service.errors import InvalidInput
from service.maintenance.pruner import Pruner
from service.maintenance.rollup import BUCKET_BOUNDS, BUCKET_SECONDS, SETTLE_SECONDS, Rollup
from service.store import Store
from service.worker import App
from tests.conftest import Database, FakeClock
from tests.ops.conftest import backdate
from tests.store.builders import claim_one, fail_job, new_job
from tests.worker.harness import wait_until
from tests.worker.test_worker_in_process import running_worker

DAY = 86_400

DAILY_JOBS_COLUMNS = [
    "day", "tenant", "queue", "kind", "finished", "succeeded", "failed", "cancelled", "retried", "retried_twice", "attempts",
    "run_seconds",
]  # fmt: skip


def daily(db: Database, view: str) -> list[dict[str, Any]]:
    rows = db.rows(f"SELECT * FROM {view} ORDER BY 1, 2")  # the views' names are ours
    return [{**row, "day": str(row["day"])} for row in rows]


def settle(clock: FakeClock) -> None:
    clock.advance(SETTLE_SECONDS + 1)


def test_each_finished_job_is_counted_once_on_its_day_by_outcome(store, db: Database, clock: FakeClock):
    _ok, _failed, cancelled, _waiting = (store.enqueue(new_job("ocr", tenant="acme")) for _ in range(4))
    clock.advance(5)
    first = claim_one(store)
    clock.advance(2)
    store.complete(first.lease, {"pages": 3})
    second = claim_one(store)
    clock.advance(4)
    fail_job(store, second, "ValueError: bad page 7", retryable=False)
    store.cancel(cancelled.id)
    settle(clock)

    assert Rollup(store).run_once() == 3  # the queued job is not finished: not folded
    [row] = daily(db, "daily_jobs")
    assert list(row) == DAILY_JOBS_COLUMNS
    assert row["day"] == clock.now().date().isoformat()
    assert (row["tenant"], row["queue"], row["kind"]) == ("acme", "default", "ocr")
    assert (row["finished"], row["succeeded"], row["failed"], row["cancelled"]) == (3, 1, 1, 1)
    assert (row["retried"], row["retried_twice"], row["attempts"]) == (0, 0, 2)
    assert row["run_seconds"] == pytest.approx(6.0, abs=1e-3)
    # The run-time histogram holds succeeded jobs only; the wait histogram every job that started.
    [run] = daily(db, "daily_run_time")
    assert run["jobs"] == 1 and run["p50_run_seconds"] == pytest.approx(2.0, rel=0.1)
    [wait] = daily(db, "daily_queue_wait")
    assert wait["jobs"] == 2

    # Idempotent: the watermark has passed them; another fold adds nothing.
    assert Rollup(store).run_once() == 0
    assert daily(db, "daily_jobs") == [row]


def test_a_job_that_finished_within_the_settle_time_waits_for_a_later_fold(store, db: Database, clock: FakeClock):
    store.enqueue(new_job())
    store.complete(claim_one(store).lease, None)
    clock.advance(SETTLE_SECONDS - 1)
    assert Rollup(store).run_once() == 0
    assert daily(db, "daily_jobs") == []
    clock.advance(2)
    assert Rollup(store).run_once() == 1
    assert [r["succeeded"] for r in daily(db, "daily_jobs")] == [1]


def test_batches_fold_in_finish_order_until_one_comes_back_short(store, db: Database, clock: FakeClock):
    for _ in range(7):
        store.enqueue(new_job())
        clock.advance(1)
        store.complete(claim_one(store).lease, None)
    settle(clock)
    assert Rollup(store, batch=3, max_batches=2).run_once() == 6
    assert Rollup(store, batch=3).run_once() == 1
    assert [r["finished"] for r in daily(db, "daily_jobs")] == [7]


def test_medians_and_p95_come_from_the_histograms(store, db: Database, clock: FakeClock):
    waits = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    for wait in waits:
        store.enqueue(new_job("render", queue="gpu"))
        clock.advance(wait)
        claimed = claim_one(store, queues=("gpu",))
        clock.advance(wait / 2)  # each ran half as long as it waited
        store.complete(claimed.lease, None)
    settle(clock)
    Rollup(store).run_once()

    [wait] = daily(db, "daily_queue_wait")
    assert (wait["queue"], wait["jobs"]) == ("gpu", 10)
    # The exact p50 of the ten is between 16 and 32; nearest rank: the 5th (16) and the 10th (512).
    assert wait["p50_wait_seconds"] == pytest.approx(16, rel=0.1)
    assert wait["p95_wait_seconds"] == pytest.approx(512, rel=0.1)
    [run] = daily(db, "daily_run_time")
    assert (run["kind"], run["jobs"]) == ("render", 10)
    assert run["p50_run_seconds"] == pytest.approx(8, rel=0.1)
    assert run["p95_run_seconds"] == pytest.approx(256, rel=0.1)


def test_every_bucket_holds_values_within_nine_percent_of_its_middle():
    assert BUCKET_BOUNDS == sorted(BUCKET_BOUNDS) and len(BUCKET_SECONDS) == len(BUCKET_BOUNDS) + 1
    for index, (low, high) in enumerate(zip(BUCKET_BOUNDS, BUCKET_BOUNDS[1:], strict=False), start=1):
        middle = BUCKET_SECONDS[index]
        assert low < middle < high and high / middle < 1.095 and middle / low < 1.095


@pytest.mark.postgres_only(reason="SQLite folds under its one write lock; no second folder can start")
def test_a_second_folder_folds_nothing_while_the_first_holds_the_watermark(store, store_url: str, clock: FakeClock):
    store.enqueue(new_job())
    store.complete(claim_one(store).lease, None)
    settle(clock)
    with psycopg.connect(store_url) as holder:  # a transaction, as a fold in progress is
        holder.execute("SELECT * FROM rollup_watermark FOR UPDATE")
        assert Rollup(store).run_once() == 0
    assert Rollup(store).run_once() == 1


def test_a_running_worker_keeps_the_rollup_current(make_store: Callable[..., Store], store_url: str, db: Database):
    live = make_store(store_url)  # the real clock: the worker's maintenance runs on it
    live.enqueue(new_job("ocr"))
    live.complete(claim_one(live).lease, None)
    backdate(db, 1 / 24, "kind = 'ocr'")  # finished an hour ago: settled
    app = App()
    app.register("noop", lambda ctx: None)
    with running_worker(live, app, touch_seconds=0.1):
        wait_until(lambda: db.rows("SELECT * FROM daily_jobs"), 10, what="the worker's fold")
    assert [(r["kind"], r["succeeded"]) for r in daily(db, "daily_jobs")] == [("ocr", 1)]


def _finish_one_job_today(store: Store, clock: FakeClock) -> None:
    store.enqueue(new_job("ocr"))
    clock.advance(1)
    store.complete(claim_one(store).lease, {"ok": True})
    settle(clock)
    assert Rollup(store).run_once() == 1


def test_the_rollup_keeps_its_days_until_its_own_retention_then_drops_whole_days(store, db: Database, clock: FakeClock):
    _finish_one_job_today(store, clock)
    first_day = clock.now().date().isoformat()
    clock.advance(300 * DAY)
    _finish_one_job_today(store, clock)
    later_day = clock.now().date().isoformat()
    histogram_rows = db.count("job_daily_histogram")
    assert [r["day"] for r in daily(db, "daily_jobs")] == [first_day, later_day]

    clock.advance(99 * DAY)  # the first day ended 399 days ago: kept
    assert store.prune_rollup(400 * DAY) == 0
    clock.advance(2 * DAY)
    first_day_rows = 1 + histogram_rows // 2  # its count row and its histograms' rows (one job each day)
    assert store.prune_rollup(400 * DAY) == first_day_rows
    assert [r["day"] for r in daily(db, "daily_jobs")] == [later_day]
    assert db.count("job_daily_histogram") == histogram_rows // 2
    assert store.prune_rollup(400 * DAY) == 0


def test_the_rollup_is_never_kept_shorter_than_the_jobs(store):
    with pytest.raises(InvalidInput):
        Pruner(store, 42 * DAY, rollup_older_than_seconds=41 * DAY)
    assert Pruner(store, 42 * DAY).prune_rollup() == 0  # no rollup retention given: nothing deleted
