"""The Python client: typed answers, named exceptions, and how ``wait`` paces itself."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import httpx
import pytest

from service.client import ApiError, Client, Job, JobSpec, Page
from service.errors import (
    IdempotencyConflict,
    InvalidInput,
    InvalidTransition,
    JobCancelled,
    JobFailed,
    JobNotFound,
    JobqError,
    PayloadTooLarge,
    Unauthorized,
)
from service.jobs import JobState
from service.store import Store
from tests.api.conftest import LiveApi
from tests.store.builders import fail_job


def test_submit_get_list_cancel_return_typed_values(api: LiveApi) -> None:
    with Client(api.url, token=api.token()) as jobq:
        job = jobq.submit("classify", {"items": [1]}, queue="default", priority=3, total=1, idempotency_key="k1")
        assert isinstance(job, Job) and isinstance(job.id, uuid.UUID)
        assert job.state is JobState.QUEUED and job.total == 1 and job.poll_after_seconds == 1
        assert isinstance(job.created_at, datetime) and job.created_at.tzinfo is not None
        assert jobq.submit("classify", {"items": [1]}, priority=3, total=1, idempotency_key="k1").id == job.id

        many = jobq.submit_many([JobSpec("sleep", {"seconds": 1}), {"kind": "fail"}])
        assert [j.kind for j in many] == ["sleep", "fail"]

        got = jobq.get(job.id)
        assert got.id == job.id and got.etag
        page = jobq.list(limit=2)
        assert isinstance(page, Page) and len(page.items) == 2 and page.next_cursor
        rest = jobq.list(limit=2, cursor=page.next_cursor)
        assert [j.id for j in page.items + rest.items] == sorted([job.id] + [j.id for j in many], reverse=True)
        assert [j.id for j in jobq.list(state=JobState.QUEUED, kind="fail").items] == [many[1].id]

        cancelled = jobq.cancel(job.id)
        assert cancelled.state is JobState.CANCELLED and cancelled.terminal
        with pytest.raises(JobCancelled):
            jobq.wait(job.id, timeout=5)


def test_errors_are_the_named_exceptions(api: LiveApi, owner_store: Store) -> None:
    with Client(api.url, token=api.token()) as jobq:
        missing = uuid.uuid4()
        with pytest.raises(JobNotFound) as not_found:
            jobq.get(missing)
        assert not_found.value.job_id == missing
        with pytest.raises(JobNotFound):
            jobq.cancel(missing)

        job = jobq.submit("x", {"n": 1}, idempotency_key="same")
        with pytest.raises(IdempotencyConflict):
            jobq.submit("x", {"n": 2}, idempotency_key="same")
        with pytest.raises(InvalidTransition) as early:
            jobq.result(job.id)
        assert early.value.state == "queued"
        with pytest.raises(InvalidInput) as invalid:
            jobq.submit("")
        assert "kind" in str(invalid.value)
        with pytest.raises(PayloadTooLarge):
            jobq.submit("x", {"blob": "x" * (2 << 20)})
        with pytest.raises(InvalidInput, match="at most 1000"):
            jobq.submit_many([JobSpec("x")] * 1001)
        with pytest.raises(TimeoutError):
            jobq.wait(job.id, timeout=0.3)

        fail_job(
            owner_store,
            owner_store.claim("w", ["default"], 1, 60)[0],
            "ValueError: row 7 is not a date",
            retryable=False,
        )
        with pytest.raises(JobFailed) as failed:
            jobq.wait(job.id, timeout=5)
        assert failed.value.error == "ValueError: row 7 is not a date"
        assert isinstance(failed.value, JobqError)

    for token in (None, "jobq_wrong"):
        with Client(api.url, token=token) as stranger, pytest.raises(Unauthorized):
            stranger.list()


def test_the_token_defaults_to_the_environment(api: LiveApi, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_TOKEN", api.token())
    with Client(api.url) as jobq:
        assert jobq.list().items == []


def test_an_unreachable_api_is_an_api_error() -> None:
    with Client("http://127.0.0.1:9", timeout=2) as jobq, pytest.raises(ApiError) as error:
        jobq.list()
    assert "no answer" in str(error.value)


# -- how wait paces itself, against a scripted server ---------------------------------------


def _job(state: str, done: int = 0, poll_after: int | None = 1) -> dict[str, Any]:
    now = datetime(2030, 1, 1, tzinfo=UTC).isoformat()
    return {
        "job_id": "01a2265b-343c-742f-8f1e-8e4ab754f03b", "kind": "x", "queue": "default", "state": state,
        "done": done, "total": None, "attempts": 1, "max_attempts": 3, "error": None, "stale": False,
        "cancel_requested": False, "created_at": now, "started_at": None, "finished_at": None,
        "updated_at": now, "result_url": None, "poll_after_seconds": None if state == "succeeded" else poll_after,
    }  # fmt: skip


def _scripted(answers: list[dict[str, Any]], seen: list[httpx.Request]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = answers.pop(0)
        return httpx.Response(200, json=body, headers={"ETag": f'W/"{body["state"]}.{body["done"]}"'})

    return httpx.MockTransport(handle)


def test_wait_honours_the_servers_hint_when_it_does_not_hold_the_request() -> None:
    seen: list[httpx.Request] = []
    answers = [_job("queued", poll_after=1), _job("queued", poll_after=5), _job("queued", poll_after=5)]
    answers += [_job("running", poll_after=5), _job("succeeded")]
    sleeps: list[float] = []
    with (
        Client("http://jobq.test", token="t", transport=_scripted(answers, seen)) as jobq,
        mock.patch("service.client.time.sleep", side_effect=sleeps.append),
    ):
        assert jobq.wait("01a2265b-343c-742f-8f1e-8e4ab754f03b", long_poll=False).state is JobState.SUCCEEDED
    assert sleeps == [1, 5, 5, 5]
    assert all("wait" not in str(r.url) for r in seen)


def test_wait_without_a_hint_polls_every_second_then_every_five() -> None:
    seen: list[httpx.Request] = []
    answers = [_job("queued", poll_after=None) for _ in range(12)] + [_job("succeeded")]
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with (
        Client("http://jobq.test", token="t", transport=_scripted(answers, seen)) as jobq,
        mock.patch("service.client.time.sleep", side_effect=sleep) as sleeps,
        mock.patch("service.client.time.monotonic", side_effect=lambda: now[0]),
    ):
        jobq.wait("01a2265b-343c-742f-8f1e-8e4ab754f03b", long_poll=False)
    assert [c.args[0] for c in sleeps.call_args_list] == [1.0] * 10 + [5.0] * 2


def test_wait_long_polls_with_the_etag_it_has() -> None:
    seen: list[httpx.Request] = []
    answers = [_job("queued"), _job("running", done=1), _job("running", done=2), _job("succeeded")]
    with (
        Client("http://jobq.test", token="t", transport=_scripted(answers, seen)) as jobq,
        mock.patch("service.client.time.sleep") as sleep,
    ):
        jobq.wait("01a2265b-343c-742f-8f1e-8e4ab754f03b", timeout=100)
    assert sleep.call_count == 0  # every answer was news: straight back to waiting
    assert [r.url.params.get("wait") for r in seen] == [None, "30.000", "30.000", "30.000"]
    assert [r.headers.get("If-None-Match") for r in seen[1:]] == ['W/"queued.0"', 'W/"running.1"', 'W/"running.2"']


def test_a_problem_without_json_still_raises_a_named_error() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(502, text="bad gateway"))
    with Client("http://jobq.test", transport=transport) as jobq, pytest.raises(ApiError) as error:
        jobq.get(uuid.uuid4())
    assert error.value.status == 502
    assert json.dumps(error.value.problem) == "{}"
