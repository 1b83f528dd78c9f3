"""Poll hints (Retry-After, poll_after_seconds) and long polls (?wait=S)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any
from unittest import mock

import httpx
import pytest

from service.jobs import Notification
from service.store import Store
from service.store.base import JOB_CHANGED
from service.web import NotifyWatcher
from tests.api.conftest import LiveApi
from tests.conftest import Database, FakeClock


def _claim(store: Store, job_id: str) -> Any:
    claimed = store.claim("test-worker", ["default"], 1, 60)
    assert [str(c.id) for c in claimed] == [job_id]
    return claimed[0]


def test_poll_hint_is_1s_for_the_first_10s_then_5s_and_none_when_terminal(
    start_api: Callable[..., LiveApi], make_store: Callable[..., Store], store_url: str, clock: FakeClock
) -> None:
    api = start_api(store_url, clock=clock)
    worker_store = make_store(store_url, clock=clock)
    http = api.http(api.token())
    submitted = http.post("/v1/jobs", json={"kind": "x"})
    job_id = submitted.json()["job_id"]
    assert submitted.headers["Retry-After"] == "1"

    def hint() -> tuple[str | None, int | None]:
        response = http.get(f"/v1/jobs/{job_id}")
        return response.headers.get("Retry-After"), response.json()["poll_after_seconds"]

    assert hint() == ("1", 1)  # 0 s old
    clock.advance(9.9)
    assert hint() == ("1", 1)
    clock.advance(0.1)
    assert hint() == ("5", 5)  # 10 s old
    clock.advance(1)
    assert hint() == ("5", 5)  # 11 s old
    lease = _claim(worker_store, job_id)
    assert hint() == ("5", 5)  # running
    worker_store.complete(lease.lease, {"ok": True})
    response = http.get(f"/v1/jobs/{job_id}")
    assert response.json()["state"] == "succeeded"
    assert hint() == (None, None)  # terminal: no more polling
    assert response.json()["result_url"] == f"/v1/jobs/{job_id}/result"
    assert http.get(response.json()["result_url"]).json() == {"job_id": job_id, "result": {"ok": True}}


def test_the_hint_counts_from_created_at_by_the_database_clock(
    start_api: Callable[..., LiveApi], store_url: str, clock: FakeClock, db: Database
) -> None:
    api = start_api(store_url, clock=clock)
    http = api.http(api.token())
    job_id = http.post("/v1/jobs", json={"kind": "x"}).json()["job_id"]
    assert db.job(job_id)["created_at"] == clock.now()  # the store wrote the (pinned) database time
    clock.advance(11)
    assert http.get(f"/v1/jobs/{job_id}").json()["poll_after_seconds"] == 5


def _long_poll(http: httpx.Client, job_id: str, wait: float, **headers: str) -> tuple[httpx.Response, float]:
    response = http.get(f"/v1/jobs/{job_id}", params={"wait": wait}, headers=headers)
    return response, time.monotonic()


def _wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.005)


def test_long_poll_on_postgres_answers_within_200ms_of_a_change_without_polling(
    start_api: Callable[..., LiveApi], pg_url: str, make_store: Callable[..., Store]
) -> None:
    api = start_api(pg_url)
    worker_store = make_store(pg_url)
    http = api.http(api.token())
    job_id = http.post("/v1/jobs", json={"kind": "x", "total": 10}).json()["job_id"]
    watcher = api.app.state.watcher
    assert isinstance(watcher, NotifyWatcher)

    with ThreadPoolExecutor(1) as pool, mock.patch.object(api.store, "get", wraps=api.store.get) as reads:
        # A change of state: queued -> running.
        waiting: Future[tuple[httpx.Response, float]] = pool.submit(_long_poll, http, job_id, 20)
        _wait_until(lambda: watcher.waiting == 1 and reads.call_count == 1)
        time.sleep(0.3)  # the request now sleeps on the notification, not on a timer
        assert reads.call_count == 1  # no polling while nothing changes
        changed_at = time.monotonic()
        lease = _claim(worker_store, job_id)
        response, answered_at = waiting.result(timeout=10)
        assert response.json()["state"] == "running"
        assert answered_at - changed_at < 0.2, f"answered {answered_at - changed_at:.3f} s after the change"
        assert reads.call_count == 2  # the first read, and one after the notification

        # A change of progress only: done 0 -> 4.
        etag = response.headers["ETag"]
        waiting = pool.submit(_long_poll, http, job_id, 20, **{"If-None-Match": etag})
        _wait_until(lambda: watcher.waiting == 1)
        time.sleep(0.1)
        changed_at = time.monotonic()
        worker_store.heartbeat(lease.lease, 60, done=4)
        response, answered_at = waiting.result(timeout=10)
        assert response.json()["done"] == 4
        assert answered_at - changed_at < 0.2, f"answered {answered_at - changed_at:.3f} s after the change"


def test_long_poll_answers_when_the_wait_runs_out(api: LiveApi) -> None:
    http = api.http(api.token())
    job_id = http.post("/v1/jobs", json={"kind": "x"}).json()["job_id"]
    started = time.monotonic()
    response = http.get(f"/v1/jobs/{job_id}", params={"wait": 0.6})
    elapsed = time.monotonic() - started
    assert response.status_code == 200 and response.json()["state"] == "queued"
    assert 0.55 <= elapsed < 3, elapsed
    assert response.headers["Retry-After"] == "1"


def test_long_poll_on_sqlite_answers_soon_after_a_change(
    start_api: Callable[..., LiveApi], sqlite_url: str, make_store: Callable[..., Store]
) -> None:
    api = start_api(sqlite_url)
    worker_store = make_store(sqlite_url)
    http = api.http(api.token())
    job_id = http.post("/v1/jobs", json={"kind": "x"}).json()["job_id"]
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_long_poll, http, job_id, 20)
        time.sleep(0.5)
        changed_at = time.monotonic()
        _claim(worker_store, job_id)
        response, answered_at = waiting.result(timeout=10)
    assert response.json()["state"] == "running"
    assert answered_at - changed_at < 1.0  # SQLite has no notifications: it re-reads every 0.2 s


def test_long_poll_answers_at_once_when_the_caller_is_behind_or_the_job_is_over(api: LiveApi) -> None:
    http = api.http(api.token())
    job_id = http.post("/v1/jobs", json={"kind": "x"}).json()["job_id"]
    started = time.monotonic()
    stale = http.get(f"/v1/jobs/{job_id}", params={"wait": 10}, headers={"If-None-Match": 'W/"older"'})
    assert stale.json()["state"] == "queued"
    http.post(f"/v1/jobs/{job_id}/cancel")
    over = http.get(f"/v1/jobs/{job_id}", params={"wait": 10})
    assert over.json()["state"] == "cancelled" and "Retry-After" not in over.headers
    assert time.monotonic() - started < 3


def test_many_long_polls_share_one_listener_connection(start_api: Callable[..., LiveApi], pg_url: str) -> None:
    api = start_api(pg_url, api_pool_size=2)
    http = api.http(api.token(), limits=httpx.Limits(max_connections=40))
    jobs = [j["job_id"] for j in http.post("/v1/jobs/batch", json={"jobs": [{"kind": "x"}] * 20}).json()["jobs"]]
    watcher = api.app.state.watcher
    with ThreadPoolExecutor(20) as pool:
        futures = [pool.submit(_long_poll, http, job_id, 20) for job_id in jobs]
        _wait_until(lambda: watcher.waiting == 20, timeout=10)
        with _Db(pg_url) as db:
            connections = db.scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        assert connections <= 2 + 1, connections  # the pool, plus the one listener
        for job_id in jobs:
            http.post(f"/v1/jobs/{job_id}/cancel")
        states = [f.result(timeout=10)[0].json()["state"] for f in futures]
    assert states == ["cancelled"] * 20


class _Db:
    def __init__(self, url: str) -> None:
        self.database = Database(url)

    def __enter__(self) -> Database:
        return self.database

    def __exit__(self, *exc: object) -> None:
        self.database.close()


def test_a_listener_reconnect_wakes_every_waiter() -> None:
    """After a reconnect the listener says "*": notifications may be lost, so everyone re-reads."""

    class FakeListener:
        def __init__(self) -> None:
            self.notes: list[list[Notification]] = [[Notification(JOB_CHANGED, "*")]]
            self.closed = threading.Event()

        def wait(self, timeout: float) -> list[Notification]:
            if self.notes:
                time.sleep(0.05)
                return self.notes.pop()
            self.closed.wait(timeout)
            return []

        def close(self) -> None:
            self.closed.set()

    store = mock.Mock()
    store.listen.return_value = FakeListener()

    async def scenario() -> list[bool]:
        watcher = NotifyWatcher(store)
        with watcher.watch("a") as first, watcher.watch("b") as second:
            watcher.start()
            try:
                return list(await asyncio.gather(first.wait(2), second.wait(2)))
            finally:
                watcher.stop()

    assert asyncio.run(scenario()) == [True, True]
    store.listen.assert_called_once_with([JOB_CHANGED])


@pytest.mark.parametrize("payload", ["01a2265b-343c-742f-8f1e-8e4ab754f03b"])
def test_a_notification_wakes_only_the_waiters_of_its_job(payload: str) -> None:
    store = mock.Mock()
    watcher = NotifyWatcher(store)

    async def scenario() -> tuple[bool, bool]:
        with watcher.watch(payload) as mine, watcher.watch("other") as theirs:
            watcher._dispatch({payload})
            return await mine.wait(0.5), await theirs.wait(0.1)

    assert asyncio.run(scenario()) == (True, False)
    assert watcher.waiting == 0


def test_with_notify_off_postgres_long_polls_by_re_reading(
    start_api: Callable[..., LiveApi], pg_url: str, make_store: Callable[..., Store]
) -> None:
    """JOBQ_NOTIFY=off (PgBouncer in transaction mode): no LISTEN, the SQLite way instead."""
    from service.web import PollingWatcher

    api = start_api(pg_url, notify=False)
    assert isinstance(api.app.state.watcher, PollingWatcher)
    worker_store = make_store(pg_url, notify=False)
    http = api.http(api.token())
    job_id = http.post("/v1/jobs", json={"kind": "x"}).json()["job_id"]
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_long_poll, http, job_id, 20)
        time.sleep(0.3)
        changed_at = time.monotonic()
        _claim(worker_store, job_id)
        response, answered_at = waiting.result(timeout=10)
    assert response.json()["state"] == "running"
    assert answered_at - changed_at < 1.0
