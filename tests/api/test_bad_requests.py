"""Rejected requests: the right status, a problem+json body a person can act on, nothing written."""

from __future__ import annotations

import json
import re
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter, ValidationError

from service.api.schemas import NOT_BLANK, JobSubmit, Name
from tests.api.conftest import LiveApi
from tests.api.problems import assert_problem
from tests.conftest import Database

LIMIT = 4096


@pytest.fixture
def small_api(start_api: Any, store_url: str) -> LiveApi:
    api: LiveApi = start_api(store_url, max_body_bytes=LIMIT, max_batch_body_bytes=2 * LIMIT)
    return api


def _nothing_written(db: Database) -> None:
    assert db.count("jobs") == 0
    assert db.count("job_attempts") == 0


def test_a_declared_oversize_body_is_a_413(small_api: LiveApi, db: Database) -> None:
    http = small_api.http(small_api.token())
    body = json.dumps({"kind": "x", "payload": {"blob": "x" * LIMIT}})
    problem = assert_problem(
        http.post("/v1/jobs", content=body, headers={"Content-Type": "application/json"}), 413, "payload-too-large"
    )
    assert str(LIMIT) in problem["detail"] and "JOBQ_MAX_BODY_BYTES" in problem["detail"]
    _nothing_written(db)


def test_a_streamed_body_is_counted_as_it_arrives(small_api: LiveApi, db: Database) -> None:
    """No Content-Length (chunked): the cap counts bytes and stops reading past it."""
    http = small_api.http(small_api.token())
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        yield b'{"kind": "x", "payload": {"blob": "'
        for _ in range(80):  # past the submit's cap: LIMIT and the envelope's 64 KiB
            sent += 1024
            yield b"x" * 1024
        yield b'"}}'

    response = http.post("/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"})
    assert "Content-Length" not in response.request.headers
    assert_problem(response, 413, "payload-too-large")
    _nothing_written(db)


def test_a_body_that_lies_about_its_length_is_still_capped(small_api: LiveApi) -> None:
    """A Content-Length under the cap does not let more bytes through: the server counts them."""
    from service.api.limits import BodySizeLimit

    received: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            received.append(message)
            if not message.get("more_body"):
                break

    limiter = BodySizeLimit(app, limit=10)
    messages = [
        {"type": "http.request", "body": b"x" * 8, "more_body": True},
        {"type": "http.request", "body": b"y" * 8},
    ]

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: Any) -> None:
        pass

    import asyncio

    from service.api.limits import BodyTooLarge

    scope = {"type": "http", "path": "/v1/jobs", "headers": [(b"content-length", b"5")]}
    with pytest.raises(BodyTooLarge):
        asyncio.run(limiter(scope, receive, send))
    assert len(received) == 1  # the second chunk, past the cap, never reached the app


def test_the_batch_endpoint_has_its_own_cap(small_api: LiveApi, db: Database) -> None:
    http = small_api.http(small_api.token())
    jobs = [{"kind": "x", "payload": {"n": "y" * 100}} for _ in range(50)]  # ~6 KiB: over 4 KiB, under 8 KiB
    assert http.post("/v1/jobs/batch", json={"jobs": jobs}).status_code == 202
    refused = assert_problem(http.post("/v1/jobs/batch", json={"jobs": jobs * 2}), 413)
    assert "JOBQ_MAX_BATCH_BODY_BYTES" in refused["detail"]  # the setting that applied, not JOBQ_MAX_BODY_BYTES
    assert db.count("jobs") == 50


MALFORMED = [
    pytest.param(b'{"kind": "x",', ["body"], id="truncated-json"),
    pytest.param(b"kind=x", ["body"], id="not-json"),
    pytest.param(b'{"kind": "x"} trailing', ["body"], id="trailing-garbage"),
    pytest.param(b"[]", ["body"], id="array-not-object"),
    pytest.param(b'{"kind": "\xff\xfe"}', None, id="not-utf8"),
    pytest.param(b'{"kind": ""}', ["body", "kind"], id="empty-kind"),
    pytest.param(b'{"kind": "   "}', ["body", "kind"], id="blank-kind"),
    # blank to Python (and to the store's own check), not to JSON Schema's \s: the schema must say so
    pytest.param(b'{"kind": "\\u001c\\u001f"}', ["body", "kind"], id="kind-of-separator-controls"),
    pytest.param(b'{"kind": "x", "queue": "\\u0085\\u3000"}', ["body", "queue"], id="blank-queue"),
    pytest.param(b'{"payload": {}}', ["body", "kind"], id="missing-kind"),
    pytest.param(b'{"kind": "x", "state": "succeeded"}', ["body", "state"], id="unknown-field-state"),
    pytest.param(b'{"kind": "x", "tenant": "other"}', ["body", "tenant"], id="unknown-field-tenant"),
    pytest.param(b'{"kind": "x", "attempts": 0}', ["body", "attempts"], id="unknown-field-attempts"),
    pytest.param(b'{"kind": 7}', ["body", "kind"], id="kind-not-string"),
    pytest.param(b'{"kind": "x", "payload": [1, 2]}', ["body", "payload"], id="payload-not-object"),
    pytest.param(b'{"kind": "x", "payload": "text"}', ["body", "payload"], id="payload-string"),
    pytest.param(b'{"kind": "x", "priority": "5"}', ["body", "priority"], id="priority-as-string"),
    pytest.param(b'{"kind": "x", "priority": true}', ["body", "priority"], id="priority-as-bool"),
    pytest.param(b'{"kind": "x", "priority": 1.5}', ["body", "priority"], id="priority-fraction"),
    pytest.param(b'{"kind": "x", "priority": 1001}', ["body", "priority"], id="priority-too-high"),
    pytest.param(b'{"kind": "x", "max_attempts": 0}', ["body", "max_attempts"], id="max-attempts-zero"),
    pytest.param(b'{"kind": "x", "max_attempts": 101}', ["body", "max_attempts"], id="max-attempts-over-cap"),
    pytest.param(b'{"kind": "x", "delay_seconds": -1}', ["body", "delay_seconds"], id="negative-delay"),
    pytest.param(b'{"kind": "x", "delay_seconds": NaN}', ["body", "delay_seconds"], id="nan-delay"),
    pytest.param(b'{"kind": "x", "total": -3}', ["body", "total"], id="negative-total"),
    pytest.param(b'{"kind": "x", "concurrency_key": ""}', ["body", "concurrency_key"], id="empty-concurrency-key"),
]


def test_malformed_bodies_are_422s(api: LiveApi, db: Database) -> None:
    """One server for all the cases (a server per case costs a second each)."""
    http = api.http(api.token())
    for case in MALFORMED:
        body, where = case.values
        response = http.post("/v1/jobs", content=body, headers={"Content-Type": "application/json"})
        problem = assert_problem(response, 422, "invalid-request")
        if where is None:  # not even text: no field to point at
            assert "UTF-8" in problem["detail"], problem
            continue
        assert problem["errors"][0]["loc"] == where, (case.id, problem)
        assert ".".join(where) in problem["detail"] or where == ["body"], case.id
    _nothing_written(db)


def test_a_name_is_blank_to_the_schema_exactly_when_it_is_blank_to_the_store() -> None:
    """The published pattern, as pydantic and Python's re read it, keeps what ``str.strip`` keeps:
    a name the schema allows is never refused later as blank (schemathesis found U+001C), and
    the other way round. (ECMA-262 reads it the same: explicit escapes only, no \\s.)"""
    pattern = JobSubmit.model_json_schema()["properties"]["kind"]["pattern"]
    assert pattern == NOT_BLANK
    name = TypeAdapter(Name)
    compiled = re.compile(pattern)
    for code in range(sys.maxunicode + 1):
        if 0xD800 <= code <= 0xDFFF:
            continue  # lone surrogates: refused for another reason
        char = chr(code)
        blank = not char.strip()
        assert (compiled.search(char) is None) is blank, hex(code)
        if blank or code in (0xFEFF, 0x180E, 0x200B):  # pydantic is slow per call: the blanks, and near-misses
            try:
                name.validate_python(char)
            except ValidationError:
                accepted = False
            else:
                accepted = True
            assert accepted is not blank, hex(code)


def test_values_the_database_cannot_hold_are_422s_not_500s(api: LiveApi, db: Database) -> None:
    http = api.http(api.token())
    for body in (
        {"kind": "x", "payload": {"n": float("inf")}},
        {"kind": "x\u0000y"},
        {"kind": "x", "payload": {"s": "a\u0000b"}},
        {"kind": "x", "queue": "q\u0000"},
    ):
        content = json.dumps(body).encode()  # json.dumps writes Infinity, which Python's parser accepts
        assert_problem(http.post("/v1/jobs", content=content, headers={"Content-Type": "application/json"}), 422)
    lone_surrogate = b'{"kind": "x", "payload": {"s": "\\ud800"}}'
    assert_problem(http.post("/v1/jobs", content=lone_surrogate, headers={"Content-Type": "application/json"}), 422)
    _nothing_written(db)


def test_a_malformed_job_id_is_a_422_and_an_unknown_one_a_404(api: LiveApi) -> None:
    http = api.http(api.token())
    for path in ("/v1/jobs/not-a-uuid", "/v1/jobs/123/result", "/v1/jobs/x/cancel"):
        method = "POST" if path.endswith("cancel") else "GET"
        problem = assert_problem(http.request(method, path), 422, "invalid-request")
        assert problem["errors"][0]["loc"] == ["path", "job_id"]
    missing = uuid.uuid4()
    assert str(missing) in assert_problem(http.get(f"/v1/jobs/{missing}"), 404, "not-found")["detail"]


BAD_QUERIES: list[dict[str, Any]] = [
    {"limit": 0},
    {"limit": 201},
    {"limit": "ten"},
    {"state": "sleeping"},
    {"created_after": "yesterday"},
    {"cursor": "!!!"},
    {"cursor": "AAAA"},
    {"wait": 31},
    {"wait": -1},
    {"kind": ["a", "b"]},
]


def test_bad_query_parameters_are_422s(api: LiveApi) -> None:
    http = api.http(api.token())
    job_path = "/v1/jobs/" + http.post("/v1/jobs", json={"kind": "x"}).json()["job_id"]
    for params in BAD_QUERIES:
        path = job_path if "wait" in params else "/v1/jobs"
        assert_problem(http.get(path, params=params), 422, "invalid-request")


def test_unknown_routes_and_methods_are_problems_too(api: LiveApi) -> None:
    http = api.http(api.token())
    assert_problem(http.get("/v1/nothing-here"), 404)
    refused = http.delete("/v1/jobs")
    problem = assert_problem(refused, 405)
    assert refused.headers["allow"] == "GET, POST"  # every method of the path, FastAPI's nesting or not
    assert problem["detail"] == "method not allowed here; allowed: GET, POST"
    assert "POST" in http.put("/v1/jobs/batch").headers["allow"].split(", ")


def test_a_body_that_is_not_json_by_content_type_is_a_422(api: LiveApi, db: Database) -> None:
    http = api.http(api.token())
    response = http.post("/v1/jobs", content=b'{"kind": "x"}', headers={"Content-Type": "text/plain"})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    # valid JSON under the wrong Content-Type: the message says what to fix
    assert "Content-Type: application/json" in response.json()["detail"] and "text/plain" in response.json()["detail"]
    _nothing_written(db)


def test_too_deep_json_is_reported_as_too_deep(api: LiveApi, db: Database) -> None:
    http = api.http(api.token())
    deep = b'{"kind": "x", "payload": {"a": ' + b"[" * 5_000 + b"]" * 5_000 + b"}}"
    for path, body in (("/v1/jobs", deep), ("/v1/jobs/batch", b'{"jobs": [' + deep + b"]}")):
        problem = assert_problem(http.post(path, content=body, headers={"Content-Type": "application/json"}), 422)
        assert "nested too deeply" in problem["detail"], problem
    _nothing_written(db)


def test_problem_bodies_never_echo_a_huge_input(api: LiveApi) -> None:
    http = api.http(api.token())
    response = http.post("/v1/jobs", json={"kind": "k" * 500_000})
    assert_problem(response, 422)
    assert len(response.content) < 2_000


def test_httpx_sees_problem_json_as_json(api: LiveApi) -> None:
    response = api.http().get("/v1/jobs")
    assert isinstance(response, httpx.Response)
    assert response.json()["status"] == 401
