"""Status, result, list (keyset pages, filters) and cancel."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from unittest import mock

from service.api.routes import decode_cursor, encode_cursor
from service.retry import RetryPolicy
from service.store import Store
from tests.api.conftest import LiveApi
from tests.api.problems import assert_problem
from tests.conftest import Database, FakeClock
from tests.store.builders import fail_job

STATUS_FIELDS = {
    "job_id", "kind", "queue", "state", "done", "total", "items_ok", "items_failed", "attempts", "max_attempts", "error", "run_after", "stale",
    "cancel_requested", "created_at", "started_at", "finished_at", "updated_at", "result_url",
    "poll_after_seconds", "parents_total", "parents_pending", "workflow_id",
}  # fmt: skip


def test_status_has_the_documented_fields_and_reads_no_result_body(api: LiveApi, owner_store: Store) -> None:
    http = api.http(api.token())
    job_id = http.post("/v1/jobs", json={"kind": "x", "payload": {"secret": "payload"}}).json()["job_id"]
    claimed = owner_store.claim("w", ["default"], 1, 60)
    owner_store.complete(claimed[0].lease, {"answer": "a large body" * 100})
    with mock.patch.object(api.store, "get_result", wraps=api.store.get_result) as get_result:
        response = http.get(f"/v1/jobs/{job_id}")
    body = response.json()
    assert set(body) == STATUS_FIELDS
    assert get_result.call_count == 0
    assert "payload" not in response.text and "large body" not in response.text
    assert body["state"] == "succeeded" and body["result_url"] == f"/v1/jobs/{job_id}/result"
    assert body["created_at"].endswith("Z")
    result = http.get(body["result_url"])
    assert result.json() == {"job_id": job_id, "result": {"answer": "a large body" * 100}}


def test_error_shows_for_a_failed_job_and_a_job_waiting_to_retry(
    api: LiveApi, make_store: Callable[..., Store], store_url: str
) -> None:
    owner_store = make_store(store_url)
    at_once = RetryPolicy(base_seconds=0.0, cap_seconds=0.0)
    http = api.http(api.token())
    job_id = http.post("/v1/jobs", json={"kind": "x", "max_attempts": 2}).json()["job_id"]
    claimed = owner_store.claim("w", ["default"], 1, 60)[0]
    fail_job(
        owner_store, claimed, "Traceback: boom", retryable=True, policy=at_once
    )  # back to queued, error kept for the record
    queued = http.get(f"/v1/jobs/{job_id}").json()
    assert queued["state"] == "queued" and queued["error"] == "Traceback: boom" and queued["attempts"] == 1
    fail_job(owner_store, owner_store.claim("w", ["default"], 1, 60)[0], "Traceback: boom again", retryable=True)
    failed = http.get(f"/v1/jobs/{job_id}").json()
    assert failed["state"] == "failed" and failed["error"] == "Traceback: boom again"
    assert failed["poll_after_seconds"] is None and failed["result_url"] is None
    problem = assert_problem(http.get(f"/v1/jobs/{job_id}/result"), 409, "invalid-state")
    assert problem["state"] == "failed" and "failed" in problem["detail"]


def test_a_result_before_success_is_a_409_naming_the_state(api: LiveApi, owner_store: Store) -> None:
    http = api.http(api.token())
    job_id = http.post("/v1/jobs", json={"kind": "x"}).json()["job_id"]
    problem = assert_problem(http.get(f"/v1/jobs/{job_id}/result"), 409, "invalid-state")
    assert problem["state"] == "queued" and "queued" in problem["detail"]
    owner_store.claim("w", ["default"], 1, 60)
    assert assert_problem(http.get(f"/v1/jobs/{job_id}/result"), 409)["state"] == "running"


def test_cancel_a_queued_job_a_running_one_and_a_finished_one(api: LiveApi, owner_store: Store, db: Database) -> None:
    http = api.http(api.token())
    queued = http.post("/v1/jobs", json={"kind": "x", "priority": 0}).json()["job_id"]
    running = http.post("/v1/jobs", json={"kind": "x", "priority": 9}).json()["job_id"]
    lease = owner_store.claim("w", ["default"], 1, 60)[0].lease
    assert str(lease.job_id) == running

    cancelled = http.post(f"/v1/jobs/{queued}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled" and "Retry-After" not in cancelled.headers

    asked = http.post(f"/v1/jobs/{running}/cancel").json()
    assert asked["state"] == "running" and asked["cancel_requested"] is True
    assert owner_store.heartbeat(lease, 60).must_stop
    owner_store.acknowledge_cancel(lease)
    assert http.get(f"/v1/jobs/{running}").json()["state"] == "cancelled"

    for job_id in (queued, running):
        problem = assert_problem(http.post(f"/v1/jobs/{job_id}/cancel"), 409, "invalid-state")
        assert problem["state"] == "cancelled"
    assert db.count("jobs", "state = 'cancelled'") == 2


def test_list_pages_newest_first_with_an_opaque_cursor(api: LiveApi) -> None:
    http = api.http(api.token())
    submitted = [j["job_id"] for j in http.post("/v1/jobs/batch", json={"jobs": [{"kind": "x"}] * 7}).json()["jobs"]]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        page = http.get("/v1/jobs", params=params).json()
        pages += 1
        seen += [item["job_id"] for item in page["items"]]
        assert set(page["items"][0]) == STATUS_FIELDS
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert cursor not in str(submitted)  # opaque: not the id in clear
    assert pages == 3
    assert seen == sorted(submitted, reverse=True)  # newest first, no repeats, none missing
    assert decode_cursor(encode_cursor(uuid.UUID(seen[2]))) == uuid.UUID(seen[2])


def test_list_filters_by_state_kind_queue_and_creation_time(
    start_api: Callable[..., LiveApi], store_url: str, clock: FakeClock
) -> None:
    api = start_api(store_url, clock=clock)
    http = api.http(api.token())
    early = http.post("/v1/jobs", json={"kind": "a", "queue": "q1"}).json()["job_id"]
    clock.advance(60)
    late = http.post("/v1/jobs", json={"kind": "b", "queue": "q2"}).json()["job_id"]
    http.post(f"/v1/jobs/{early}/cancel")

    def ids(**params: Any) -> list[str]:
        return [item["job_id"] for item in http.get("/v1/jobs", params=params).json()["items"]]

    assert ids() == [late, early]
    assert ids(state="cancelled") == [early]
    assert ids(state="queued") == [late]
    assert ids(kind="b") == [late]
    assert ids(queue="q1") == [early]
    assert ids(created_after=(clock.now() - timedelta(seconds=30)).isoformat()) == [late]
    naive = (clock.now() - timedelta(seconds=30)).replace(tzinfo=None).isoformat()
    assert ids(created_after=naive) == [late]  # no offset: UTC
    assert ids(kind="nothing") == []
