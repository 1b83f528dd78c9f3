"""The console's search and charts on both stores: every filter of a job search, a capped
count, pages both ways keeping the filters; outcomes per queue or kind from the finished jobs'
window and from the daily rollup."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from service.errors import InvalidInput
from service.jobs import JobCount, JobQuery, JobState
from service.maintenance.rollup import BUCKET_BOUNDS, BUCKET_SECONDS
from service.retry import GiveUp, Retry
from tests.conftest import FakeClock
from tests.store.builders import claim_one, new_job


def _enqueue(store, **fields):
    job = store.enqueue(new_job(**fields))
    time.sleep(0.002)  # ids carry milliseconds: keep them in creation order
    return job.id


def _search(store, **filters):
    return [s.id for s in store.list_jobs(JobQuery(tenant=filters.pop("tenant", None), **filters)).items]


def test_each_search_filter_finds_exactly_its_jobs(store, clock: FakeClock):
    early = _enqueue(store, tenant="acme", kind="ocr", queue="gpu", idempotency_key="order-17")
    clock.advance(3600)
    keyed = _enqueue(store, tenant="globex", kind="ocr", concurrency_key="customer-9", idempotency_key="order-17")
    failing = _enqueue(store, tenant="acme", kind="resize", queue="a", max_attempts=1)
    retrying = _enqueue(store, tenant="acme", kind="resize", queue="b", max_attempts=3)
    store.fail(claim_one(store, queues=("a",)).lease, "OSError: Disk 100%_full on /dev/sda", GiveUp())
    store.fail(claim_one(store, queues=("b",)).lease, "TimeoutError: upstream", Retry(3600.0))
    healed = _enqueue(store, kind="heal", queue="c", max_attempts=2)
    store.fail(claim_one(store, queues=("c",)).lease, "OSError: Disk 100%_full again", Retry(0.0))
    store.complete(claim_one(store, queues=("c",)).lease, None)  # succeeded: keeps the old error, shows none
    middle = clock.now() - timedelta(minutes=30)

    assert _search(store, kind="ocr") == [keyed, early]
    assert _search(store, queue="gpu") == [early]
    assert _search(store, queue="b") == [retrying]
    assert _search(store, tenant="acme") == [retrying, failing, early]
    assert _search(store, state=JobState.FAILED) == [failing]
    assert _search(store, created_before=middle) == [early]
    assert _search(store, created_after=middle) == [healed, retrying, failing, keyed]
    assert _search(store, idempotency_key="order-17") == [keyed, early]
    assert _search(store, idempotency_key="order-17", tenant="acme") == [early]
    assert _search(store, concurrency_key="customer-9") == [keyed]
    assert _search(store, error_text="disk 100%_FULL") == [failing]  # any case; % and _ as themselves
    assert _search(store, error_text="100%") == [failing]
    assert _search(store, error_text="upstream", state=JobState.QUEUED) == [retrying]
    assert _search(store, error_text="disk 1000") == []
    assert healed not in _search(store, error_text="again")
    assert _search(store, kind="ocr", created_after=middle, idempotency_key="order-17") == [keyed]


def test_pages_go_forward_and_back_with_the_filter_and_a_count_stops_at_its_cap(store):
    ids = [_enqueue(store, kind="paged") for _ in range(7)][::-1]  # newest first
    _enqueue(store, kind="other")
    query = JobQuery(tenant=None, kind="paged", limit=3)

    first = store.list_jobs(query)
    second = store.list_jobs(JobQuery(tenant=None, kind="paged", limit=3, after_id=first.next_after_id))
    third = store.list_jobs(JobQuery(tenant=None, kind="paged", limit=3, after_id=second.next_after_id))
    assert [[s.id for s in p.items] for p in (first, second, third)] == [ids[:3], ids[3:6], ids[6:]]
    assert third.next_after_id is None

    back = store.list_jobs(JobQuery(tenant=None, kind="paged", limit=3, before_id=third.items[0].id))
    assert [s.id for s in back.items] == ids[3:6] and back.next_after_id == ids[5]
    assert back.newer_before_id == ids[3]  # more newer ones: the page before this one
    front = store.list_jobs(JobQuery(tenant=None, kind="paged", limit=3, before_id=back.newer_before_id))
    assert [s.id for s in front.items] == ids[:3] and front.newer_before_id is None

    assert store.count_jobs(query, 100) == JobCount(7, exact=True)
    assert store.count_jobs(JobQuery(tenant=None, kind="paged", after_id=ids[0]), 100) == JobCount(7, exact=True)
    # A budget of 5 jobs read, newest first: the newest ("other") is no match, so 5 of the 6 read
    # match and the count is "at least 5".
    assert store.count_jobs(query, 5) == JobCount(5, exact=False)
    assert store.count_jobs(JobQuery(tenant="nobody"), 5) == JobCount(0, exact=True)
    with pytest.raises(InvalidInput):
        store.count_jobs(query, 0)
    with pytest.raises(InvalidInput):
        store.list_jobs(JobQuery(tenant=None, after_id=ids[0], before_id=ids[1]))


def _finish(store, clock: FakeClock, *, kind: str, queue: str, ok: bool, wait: float, run: float):
    store.enqueue(new_job(kind, queue=queue, max_attempts=1))
    clock.advance(wait)
    job = claim_one(store, queues=(queue,))
    clock.advance(run)
    if ok:
        store.complete(job.lease, None)
    else:
        store.fail(job.lease, "ValueError: bad", GiveUp())


def test_recent_outcomes_count_runs_and_waits_per_queue_or_kind_and_bucket(store, clock: FakeClock):
    _finish(store, clock, kind="ocr", queue="gpu", ok=True, wait=2, run=10)  # ends 70 min before "now"
    clock.advance(20 * 60)
    _finish(store, clock, kind="ocr", queue="gpu", ok=True, wait=4, run=20)  # 50 min ago: bucket 2
    _finish(store, clock, kind="scan", queue="gpu", ok=False, wait=6, run=30)
    clock.advance(50 * 60 - 60)
    _finish(store, clock, kind="scan", queue="cpu", ok=True, wait=0, run=0)  # ends "now": the last bucket

    by_queue = {(o.name, o.bucket): o for o in store.recent_outcomes("queue", 3600, 12)}
    assert sorted(by_queue) == [("cpu", 11), ("gpu", 2)]
    gpu = by_queue[("gpu", 2)]
    assert (gpu.succeeded, gpu.failed, gpu.runs, gpu.waits) == (1, 1, 2, 2)
    assert gpu.run_seconds == pytest.approx(50, abs=0.01) and gpu.wait_seconds == pytest.approx(10, abs=0.01)
    by_kind = {(o.name, o.bucket): (o.succeeded, o.failed) for o in store.recent_outcomes("kind", 86_400, 24)}
    assert by_kind == {("ocr", 22): (1, 0), ("ocr", 23): (1, 0), ("scan", 23): (1, 1)}
    with pytest.raises(InvalidInput):
        store.recent_outcomes("tenant; DROP TABLE jobs", 3600, 12)


def test_daily_outcomes_read_the_rollup_per_day(store, clock: FakeClock):
    _finish(store, clock, kind="ocr", queue="gpu", ok=True, wait=2, run=10)
    clock.advance(86_400)
    _finish(store, clock, kind="ocr", queue="gpu", ok=False, wait=4, run=20)
    _finish(store, clock, kind="ocr", queue="gpu", ok=True, wait=4, run=30)
    clock.advance(120)
    store.fold_rollup(BUCKET_BOUNDS, BUCKET_SECONDS, 60.0, 100)

    yesterday = (clock.now() - timedelta(days=1)).date()
    rows = {(o.name, o.bucket): o for o in store.daily_outcomes("kind", yesterday)}
    assert sorted(rows) == [("ocr", 0), ("ocr", 1)]
    today = rows[("ocr", 1)]
    assert (today.succeeded, today.failed, today.runs, today.waits) == (1, 1, 2, 2)
    assert today.run_seconds == pytest.approx(50, abs=0.01)
    assert today.wait_seconds == pytest.approx(8, rel=0.1)  # histogram middles: within ±9 %
    assert store.daily_outcomes("kind", clock.now().date() + timedelta(days=1)) == []
