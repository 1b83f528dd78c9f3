"""Submitting jobs: one, idempotently, and in batches."""

from __future__ import annotations

import uuid
from typing import Any
from unittest import mock

from service.jobs import NewJob
from tests.api.conftest import LiveApi
from tests.api.problems import assert_problem
from tests.conftest import Database


def test_submit_answers_202_with_the_jobs_url_and_status(api: LiveApi, db: Database) -> None:
    http = api.http(api.token())
    response = http.post(
        "/v1/jobs",
        json={"kind": "classify", "payload": {"items": ["a", "b"]}, "queue": "gpu", "priority": 7, "total": 2},
    )
    assert response.status_code == 202, response.text
    body = response.json()
    job_id = uuid.UUID(body["job_id"])
    assert response.headers["Location"] == f"/v1/jobs/{job_id}"
    assert response.headers["Retry-After"] == "1"
    assert body["state"] == "queued"
    assert (body["kind"], body["queue"], body["total"], body["done"]) == ("classify", "gpu", 2, 0)
    assert body["result_url"] is None and body["error"] is None and body["poll_after_seconds"] == 1

    row = db.job(job_id)
    assert row["tenant"] == "acme"
    assert row["payload"] == {"items": ["a", "b"]}
    assert row["priority"] == 7

    assert http.get(response.headers["Location"]).json()["job_id"] == str(job_id)


def test_defaults_are_the_queues_defaults(api: LiveApi, db: Database) -> None:
    body = api.http(api.token()).post("/v1/jobs", json={"kind": "sleep"}).json()
    row = db.job(body["job_id"])
    assert (row["queue"], row["priority"], row["max_attempts"], row["payload"]) == ("default", 0, 3, {})


def test_the_same_idempotency_key_and_body_return_the_same_job(api: LiveApi, db: Database) -> None:
    http = api.http(api.token())
    request: dict[str, Any] = {"kind": "classify", "payload": {"items": [1, 2, 3]}, "total": 3}
    first = http.post("/v1/jobs", json=request, headers={"Idempotency-Key": "order-42"})
    again = http.post("/v1/jobs", json=request, headers={"Idempotency-Key": "order-42"})
    # The same body with its keys in another order is the same request.
    reordered = http.post(
        "/v1/jobs",
        json={"total": 3, "payload": {"items": [1, 2, 3]}, "kind": "classify"},
        headers={"Idempotency-Key": "order-42"},
    )
    assert first.status_code == again.status_code == reordered.status_code == 202
    assert first.json()["job_id"] == again.json()["job_id"] == reordered.json()["job_id"]
    assert again.headers["Location"] == first.headers["Location"]
    assert db.count("jobs") == 1


def test_the_same_idempotency_key_with_another_body_is_a_409(api: LiveApi, db: Database) -> None:
    http = api.http(api.token())
    original = http.post(
        "/v1/jobs", json={"kind": "classify", "payload": {"items": [1]}}, headers={"Idempotency-Key": "k"}
    )
    assert original.status_code == 202
    for other in (
        {"kind": "classify", "payload": {"items": [2]}},  # another payload
        {"kind": "sleep", "payload": {"items": [1]}},  # another kind
        {"kind": "classify", "payload": {"items": [1]}, "queue": "other"},
        {"kind": "classify", "payload": {"items": [1]}, "priority": 5},
        {"kind": "classify", "payload": {"items": [1]}, "max_attempts": 1},
        {"kind": "classify", "payload": {"items": [1]}, "total": 9},
        {"kind": "classify", "payload": {"items": [1]}, "concurrency_key": "c"},
    ):
        problem = assert_problem(
            http.post("/v1/jobs", json=other, headers={"Idempotency-Key": "k"}), 409, "idempotency-conflict"
        )
        assert "'k'" in problem["detail"] and original.json()["job_id"] in problem["detail"]
    assert db.count("jobs") == 1
    assert db.job(original.json()["job_id"])["payload"] == {"items": [1]}


def test_idempotency_keys_belong_to_one_tenant(api: LiveApi, db: Database) -> None:
    request = {"kind": "classify", "payload": {"items": [1]}}
    mine = api.http(api.token("acme")).post("/v1/jobs", json=request, headers={"Idempotency-Key": "k"})
    theirs = api.http(api.token("globex")).post("/v1/jobs", json=request, headers={"Idempotency-Key": "k"})
    assert mine.status_code == theirs.status_code == 202
    assert mine.json()["job_id"] != theirs.json()["job_id"]
    assert db.count("jobs") == 2


def test_an_empty_or_overlong_idempotency_key_is_a_422(api: LiveApi, db: Database) -> None:
    http = api.http(api.token())
    for key in ("", "k" * 256):
        assert_problem(http.post("/v1/jobs", json={"kind": "x"}, headers={"Idempotency-Key": key}), 422)
    assert db.count("jobs") == 0


def test_a_batch_of_1000_is_stored_in_one_round_trip_in_order(api: LiveApi, db: Database) -> None:
    http = api.http(api.token())
    jobs = [{"kind": "classify", "payload": {"n": n}, "priority": n % 10} for n in range(1000)]
    with mock.patch.object(api.store, "enqueue_many", wraps=api.store.enqueue_many) as enqueue_many:
        response = http.post("/v1/jobs/batch", json={"jobs": jobs})
    assert response.status_code == 202, response.text
    assert enqueue_many.call_count == 1  # one store call: one statement on PostgreSQL, one transaction on SQLite
    statuses = response.json()["jobs"]
    assert len(statuses) == 1000 and len({s["job_id"] for s in statuses}) == 1000
    assert db.count("jobs") == 1000
    payloads = {row["id"]: row["payload"]["n"] for row in db.rows("SELECT id, payload FROM jobs")}
    assert [payloads[s["job_id"]] for s in statuses] == list(range(1000))


def test_a_batch_takes_idempotency_keys_and_a_retried_batch_duplicates_nothing(api: LiveApi, db: Database) -> None:
    http = api.http(api.token())
    single = http.post("/v1/jobs", json={"kind": "classify", "payload": {"n": 0}}, headers={"Idempotency-Key": "k-0"})
    jobs = [{"kind": "classify", "payload": {"n": n}, "idempotency_key": f"k-{n}"} for n in range(5)]

    first = http.post("/v1/jobs/batch", json={"jobs": jobs})
    again = http.post("/v1/jobs/batch", json={"jobs": jobs})

    assert first.status_code == again.status_code == 202, first.text
    ids = [s["job_id"] for s in first.json()["jobs"]]
    assert ids[0] == single.json()["job_id"]  # the key a single submit used names the same job
    assert [s["job_id"] for s in again.json()["jobs"]] == ids
    assert db.count("jobs") == 5


def test_a_batch_key_used_for_another_job_is_a_409_and_writes_nothing(api: LiveApi, db: Database) -> None:
    http = api.http(api.token())
    http.post("/v1/jobs/batch", json={"jobs": [{"kind": "classify", "payload": {"n": 1}, "idempotency_key": "k"}]})
    for jobs in (
        # another body for an earlier batch's key, after a job of its own
        [{"kind": "new"}, {"kind": "classify", "payload": {"n": 2}, "idempotency_key": "k"}],
        [{"kind": "x", "idempotency_key": "twice"}, {"kind": "y", "idempotency_key": "twice"}],  # twice in one batch
    ):
        problem = assert_problem(http.post("/v1/jobs/batch", json={"jobs": jobs}), 409, "idempotency-conflict")
        assert "idempotency key" in problem["detail"].lower()
    assert db.job(db.scalar("SELECT id FROM jobs WHERE idempotency_key = 'k'"))["payload"] == {"n": 1}
    assert db.count("jobs") == 1  # all or none: not the batches' other jobs


def test_a_batch_over_1000_is_a_422_as_its_schema_says_and_writes_nothing(api: LiveApi, db: Database) -> None:
    # The status any client that reads the schema's maxItems expects (schemathesis does), whatever
    # the jobs in it: a well-formed batch that is one too long, and one with a bad job in it too.
    schema = api.app.openapi()["components"]["schemas"]["BatchSubmit"]["properties"]["jobs"]
    assert schema["maxItems"] == 1000
    http = api.http(api.token())
    for jobs in ([{"kind": "x"}] * 1001, [{"kind": "x"}] * 1000 + [{"kind": ""}]):
        problem = assert_problem(http.post("/v1/jobs/batch", json={"jobs": jobs}), 422, "invalid-request")
        assert problem["errors"][0]["loc"] == ["body", "jobs"], problem["errors"][:3]
        assert "at most 1000" in problem["detail"]
    assert db.count("jobs") == 0


def test_one_bad_job_rejects_the_whole_batch(api: LiveApi, db: Database) -> None:
    http = api.http(api.token())
    problem = assert_problem(http.post("/v1/jobs/batch", json={"jobs": [{"kind": "x"}, {"kind": ""}]}), 422)
    assert problem["errors"][0]["loc"] == ["body", "jobs", 1, "kind"]
    assert_problem(http.post("/v1/jobs/batch", json={"jobs": []}), 422)
    assert db.count("jobs") == 0


def test_a_batch_payload_over_the_payload_limit_is_a_413(start_api: Any, store_url: str, db: Database) -> None:
    api = start_api(store_url, max_body_bytes=2048)
    http = api.http(api.token())
    response = http.post("/v1/jobs/batch", json={"jobs": [{"kind": "x"}, {"kind": "x", "payload": {"s": "x" * 3000}}]})
    assert "jobs[1].payload" in assert_problem(response, 413)["detail"]
    assert db.count("jobs") == 0


def test_submit_builds_the_domain_job_from_the_request() -> None:
    from service.api.schemas import JobSubmit

    job = JobSubmit.model_validate({"kind": "k", "delay_seconds": 5, "concurrency_key": "c"}).to_new_job("t", "key")
    assert job == NewJob(kind="k", delay_seconds=5, concurrency_key="c", tenant="t", idempotency_key="key")


def test_a_non_ascii_idempotency_key_is_refused_alike_by_header_and_batch(api: LiveApi, db: Database) -> None:
    """Issue 26: "é" sent as a header (bytes read as Latin-1) and in a batch's body (UTF-8) were two
    keys and made two jobs. The key's alphabet is visible ASCII, one rule on both ways in."""
    http = api.http(api.token())
    key = "caf\u00e9-42"
    by_header = http.post("/v1/jobs", json={"kind": "classify"}, headers={"Idempotency-Key": key.encode("utf-8")})
    by_body = http.post("/v1/jobs/batch", json={"jobs": [{"kind": "classify", "idempotency_key": key}]})
    by_route = http.post(  # chunked: not the fast path's, the route's own Header parameter
        "/v1/jobs",
        content=iter([b'{"kind": "classify"}']),
        headers={"Idempotency-Key": key.encode("utf-8"), "Content-Type": "application/json"},
    )
    for refused in (by_header, by_route, by_body):
        problem = assert_problem(refused, 422)
        assert "visible ASCII" in problem["detail"] and "idempotency" in problem["detail"].lower(), problem
    for invisible in ("with space", "tab\there"):
        assert_problem(http.post("/v1/jobs", json={"kind": "x"}, headers={"Idempotency-Key": invisible}), 422)
        assert_problem(http.post("/v1/jobs/batch", json={"jobs": [{"kind": "x", "idempotency_key": invisible}]}), 422)
    assert db.count("jobs") == 0
    ascii_key = "caf%C3%A9-42"  # percent-encoded: the same job both ways
    one = http.post("/v1/jobs", json={"kind": "classify"}, headers={"Idempotency-Key": ascii_key})
    two = http.post("/v1/jobs/batch", json={"jobs": [{"kind": "classify", "idempotency_key": ascii_key}]})
    assert one.json()["job_id"] == two.json()["jobs"][0]["job_id"] and db.count("jobs") == 1
