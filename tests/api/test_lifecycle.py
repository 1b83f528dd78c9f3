"""The whole life of a job over HTTP, with a real worker process running the example handlers."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from service.client import Client, JobCancelled, JobFailed
from service.jobs import JobState
from tests.api.conftest import LiveApi, WorkerProcess
from tests.conftest import Database

pytestmark = pytest.mark.slow


def test_classify_over_http_progress_rises_then_the_result(
    api: LiveApi, start_worker: Callable[..., WorkerProcess], store_url: str, db: Database
) -> None:
    http = api.http(api.token())
    items = [f"review {n}" for n in range(24)]
    submitted = http.post("/v1/jobs", json={"kind": "classify", "payload": {"items": items, "delay": 0.1}})
    assert submitted.status_code == 202
    job_url = submitted.headers["Location"]
    start_worker(store_url, "--poll-seconds", "0.2")

    seen_done: list[int] = []
    states: list[str] = []
    deadline = time.monotonic() + 60
    status = submitted.json()
    etag = None
    while status["state"] not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, f"job never finished: {status}"
        headers = {"If-None-Match": etag} if etag else {}
        response = http.get(job_url, params={"wait": 5}, headers=headers)
        assert response.status_code == 200, response.text
        etag = response.headers["ETag"]
        status = response.json()
        states.append(status["state"])
        if status["state"] == "running":
            assert status["total"] in (None, len(items))  # None until the first heartbeat reports it
            assert status["stale"] is False
            seen_done.append(status["done"])
            assert response.headers["Retry-After"] in ("1", "5")

    assert status["state"] == "succeeded", status
    assert "running" in states
    intermediate = sorted({done for done in seen_done if 0 < done < len(items)})
    assert len(intermediate) >= 2, f"progress did not visibly rise: {seen_done}"
    assert seen_done == sorted(seen_done)  # never goes backwards
    assert (status["done"], status["total"], status["attempts"]) == (len(items), len(items), 1)
    assert status["error"] is None and status["poll_after_seconds"] is None
    assert status["result_url"] == f"{job_url}/result"
    assert status["started_at"] and status["finished_at"]

    result = http.get(status["result_url"])
    assert result.status_code == 200
    labels = result.json()["result"]["results"]
    assert [entry["item"] for entry in labels] == items
    assert {entry["label"] for entry in labels} <= {"positive", "negative", "neutral"}
    assert db.attempts(status["job_id"])[0]["outcome"] == "succeeded"


def test_the_client_waits_for_success_failure_and_cancellation(
    api: LiveApi, start_worker: Callable[..., WorkerProcess], store_url: str
) -> None:
    start_worker(store_url, "--poll-seconds", "0.2")
    with Client(api.url, token=api.token()) as jobq:
        job = jobq.submit("classify", {"items": ["a", "b", "c"], "delay": 0.05})
        done = jobq.wait(job.id, timeout=60)
        assert done.state is JobState.SUCCEEDED and done.finished_at is not None
        assert [r["item"] for r in jobq.result(job.id)["results"]] == ["a", "b", "c"]

        failing = jobq.submit("fail", {"permanent": True, "message": "bad input row 7"})
        with pytest.raises(JobFailed) as failed:
            jobq.wait(failing.id, timeout=60)
        assert "bad input row 7" in (failed.value.error or "")
        assert failed.value.status.state is JobState.FAILED

        sleeping = jobq.submit("sleep", {"seconds": 30})
        deadline = time.monotonic() + 30
        while jobq.get(sleeping.id).state is not JobState.RUNNING:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        asked = jobq.cancel(sleeping.id)
        assert asked.cancel_requested and asked.state is JobState.RUNNING
        with pytest.raises(JobCancelled):
            jobq.wait(sleeping.id, timeout=60)
