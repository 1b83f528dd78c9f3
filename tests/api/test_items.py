"""Per-item outcomes over HTTP, with a real worker (in this process) on both stores: a job
that succeeds with failed items marked, partial results while it runs, the failed items
replayed alone; the items route's errors and tenant scoping."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from service.client import Client, JobNotFound
from service.errors import InvalidInput
from service.jobs import ItemState
from service.store import Store
from service.worker import App, JobContext, Worker, WorkerConfig
from tests.api.conftest import LiveApi

BROKEN = {17, 150}


@contextmanager
def worker_on(store: Store, app: App) -> Iterator[Worker]:
    worker = Worker(store, app, WorkerConfig(poll_seconds=0.1, lease_seconds=3.0, grace_seconds=1.0, flush_seconds=0.1))
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
    thread.start()
    assert worker.started.wait(10)
    try:
        yield worker
    finally:
        worker.shutdown()
        thread.join(20)


def items_app(broken: set[int], ran: list[tuple[int, int]], delay: float = 0.0) -> App:
    app = App()

    @app.handler("label", max_item_failures=5)
    def label(ctx: JobContext) -> dict[str, Any]:
        def one(n: int) -> dict[str, int]:
            ran.append((ctx.attempt, n))
            time.sleep(delay)
            if n in broken:
                raise ValueError(f"item {n} is unreadable")
            return {"n": n, "double": 2 * n}

        return {"labels": ctx.map(list(range(ctx.payload["count"])), one)}

    return app


@pytest.fixture
def worker_store(make_store: Callable[..., Store], store_url: str) -> Store:
    return make_store(store_url, retry_base_seconds=0.01)


def test_a_job_with_failing_items_succeeds_with_them_marked(api: LiveApi, worker_store: Store) -> None:
    ran: list[tuple[int, int]] = []
    broken = set(BROKEN)
    token = api.token("acme")
    http = api.http(token)
    with Client(api.url, token) as client, worker_on(worker_store, items_app(broken, ran)):
        job = client.submit("label", {"count": 200})
        done = client.wait(job.id, timeout=60)

        assert (done.state.value, done.items_ok, done.items_failed, done.done, done.total) == (
            "succeeded",
            198,
            2,
            200,
            200,
        )
        answer = http.get(f"/v1/jobs/{job.id}/items", params={"state": "failed"}).json()
        assert [(i["index"], i["state"]) for i in answer["items"]] == [(17, "failed"), (150, "failed")]
        assert all(i["error"].startswith(f"ValueError: item {i['index']} is unreadable") for i in answer["items"])
        assert answer["next_cursor"] is None
        result = client.result(job.id)
        assert len(result["labels"]) == 198 and result["labels"][17] == {"n": 18, "double": 36}
        every = list(client.items(job.id, page_size=64))
        assert [i.index for i in every] == list(range(200))
        assert [i.result for i in every if i.state is ItemState.OK] == result["labels"]
        assert [i.index for i in client.items(job.id, state="failed")] == [17, 150]

        # Replay the failed items alone (recorded like any replay); now they work.
        broken.clear()
        replay = http.post("/v1/jobs/replay", json={"ids": [str(job.id)], "failed_items": True})
        assert replay.status_code == 200 and replay.json()["job_ids"] == [str(job.id)]
        again = client.wait(job.id, timeout=60)
        labels = client.result(job.id)["labels"]

    assert (again.items_ok, again.items_failed, again.attempts) == (200, 0, 1)
    assert sorted(n for attempt, n in ran[200:]) == [17, 150], "the replay ran only the failed items"
    assert len(labels) == 200


def test_items_are_readable_while_the_job_runs_and_never_go_back(api: LiveApi, worker_store: Store) -> None:
    ran: list[tuple[int, int]] = []
    with Client(api.url, api.token("acme")) as client, worker_on(worker_store, items_app(set(), ran, delay=0.02)):
        job = client.submit("label", {"count": 100})
        counts = []
        while True:
            status = client.get(job.id)
            seen = [i.index for i in client.items(job.id)]
            assert seen == list(range(len(seen))), "the outcomes so far, in item order"
            counts.append(len(seen))
            if status.terminal:
                break
            time.sleep(0.1)
    assert counts == sorted(counts), f"an item count went back: {counts}"
    assert any(0 < n < 100 for n in counts), f"never saw a partial result: {counts}"
    assert counts[-1] == 100


def test_the_items_route_is_scoped_and_refuses_bad_input(api: LiveApi) -> None:
    with Client(api.url, api.token("acme")) as mine, Client(api.url, api.token("globex")) as theirs:
        _check_scoping_and_input(api, mine, theirs)


def _check_scoping_and_input(api: LiveApi, mine: Client, theirs: Client) -> None:
    job = mine.submit("label", {"count": 3})

    assert list(mine.items(job.id)) == [], "a queued job has no outcomes yet"
    with pytest.raises(JobNotFound):
        list(theirs.items(job.id))
    http = api.http(api.token("acme"))
    for params in (
        {"state": "done"},
        {"cursor": "not a cursor"},
        {"cursor": "eHl6"},
        {"limit": 0},
        {"limit": 1001},
        {"page": 2},
    ):
        answer = http.get(f"/v1/jobs/{job.id}/items", params=params)
        assert answer.status_code == 422, (params, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
    with pytest.raises(InvalidInput):
        list(mine.items(job.id, state="done"))
    assert http.get("/v1/jobs/not-a-uuid/items").status_code == 422
