"""The submit's fast path (service/api/fast_submit.py) answers exactly like the FastAPI route.

Two apps on one database and one pinned clock: the normal one, and one with the
fast path taken out. A plain submit gets the route's answer byte for byte (status,
headers, body: the new job's own id aside, as each submit makes a job of its own);
a repeated Idempotency-Key, and a token or a job the store refuses, get it to the byte.
Everything the fast path leaves to the route (a body that is not a valid job, a
header out of bounds, a missing or malformed token) still gets the route's answer,
a 4xx problem that writes nothing.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from unittest import mock

import pytest

from service.api.fast_submit import SubmitFastPath
from service.errors import StoreUnavailable
from service.store import Store
from service.tokens import hash_token, new_token
from tests.api.asgi import Answer, AsgiClient, asgi_client
from tests.api.conftest import LiveApi
from tests.api.problems import assert_problem
from tests.conftest import Database, FakeClock

PROBLEM = b"application/problem+json"


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests the fast path answered itself (it returns None for those)."""
    taken: list[str] = []
    original = SubmitFastPath.answer

    async def recording(self: SubmitFastPath, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        left = await original(self, scope, receive, send)
        if left is None:
            taken.append(scope["path"])
        return left

    monkeypatch.setattr(SubmitFastPath, "answer", recording)
    return taken


def token_of(store: Store, tenant: str = "acme") -> str:
    token = new_token()
    store.create_token(tenant, hash_token(token))
    return token


def headers_for(token: str | None, content_type: str = "application/json", **more: str) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", content_type.encode())]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    return headers + [(name.replace("_", "-").encode(), value.encode("latin-1")) for name, value in more.items()]


def as_job(answer: Answer, job_id: bytes) -> Answer:
    """The answer as it would be for the job ``job_id``: a submit's answer but for its new job's id."""
    own = json.loads(answer.body)["job_id"].encode()
    return Answer(
        answer.status, sorted((k, v.replace(own, job_id)) for k, v in answer.headers), answer.body.replace(own, job_id)
    )


async def submit_both(fast: AsgiClient, slow: AsgiClient, body: bytes, headers: Any, chunks: int = 1) -> Answer:
    """The route's answer, after checking the fast app's is the same but for the job's id."""
    expected = await slow.post("/v1/jobs", body, headers, chunks=chunks)
    got = await fast.post("/v1/jobs", body, headers, chunks=chunks)
    assert expected.status == 202, expected
    assert as_job(got, json.loads(expected.body)["job_id"].encode()) == expected
    return got


PLAIN_SUBMITS = [
    b'{"kind":"k"}',
    json.dumps(
        {
            "kind": "r\u00e4ksm\u00f6rg\u00e5s \u2713 \U0001f600",
            "payload": {"text": "caf\u00e9\n\u2028", "n": [1, 2.5, None]},
            "queue": "gpu\tq",
            "priority": 7,
            "max_attempts": 5,
            "delay_seconds": 90,
            "total": 3,
            "concurrency_key": "c:1",
        }
    ).encode(),
    b'{"kind": "k", "priority": 3.0, "total": 0, "delay_seconds": 0, "payload": {}}',
    b'{"payload": {"a": {"b": {"c": [true, false, null, "\\u00e9"]}}}, "kind": "late", "queue": "default"}',
]


@pytest.mark.parametrize("auth", [True, False], ids=["auth", "no-auth"])
def test_plain_submits_match_the_route_byte_for_byte(
    store_url: str, clock: FakeClock, auth: bool, db: Database, answered: list[str]
) -> None:
    asyncio.run(_plain_submits(store_url, clock, auth, db, answered))


async def _plain_submits(store_url: str, clock: FakeClock, auth: bool, db: Database, answered: list[str]) -> None:
    async with (
        asgi_client(store_url, clock, auth=auth) as (fast, app),
        asgi_client(store_url, clock, auth=auth, fast_submit=False) as (slow, _),
    ):
        token = token_of(app.state.store) if auth else None
        tenant = "acme" if auth else "default"
        for body in PLAIN_SUBMITS:
            got = await submit_both(fast, slow, body, headers_for(token))
            assert db.job(json.loads(got.body)["job_id"])["tenant"] == tenant
        for content_type in ("application/json; charset=utf-8", "Application/JSON"):
            await submit_both(fast, slow, b'{"kind":"k"}', headers_for(token, content_type))
        await submit_both(fast, slow, PLAIN_SUBMITS[1], headers_for(token), chunks=3)
        assert len(answered) == len(PLAIN_SUBMITS) + 3  # every one of them by the fast path
        assert db.count("jobs") == 2 * len(answered)


def test_idempotency_keys_answer_to_the_byte_as_the_route(
    store_url: str, clock: FakeClock, db: Database, answered: list[str]
) -> None:
    asyncio.run(_idempotency_keys(store_url, clock, db, answered))


async def _idempotency_keys(store_url: str, clock: FakeClock, db: Database, answered: list[str]) -> None:
    async with (
        asgi_client(store_url, clock) as (fast, app),
        asgi_client(store_url, clock, fast_submit=False) as (slow, _),
    ):
        token = token_of(app.state.store)
        body, other = b'{"kind":"k","payload":{"n":1}}', b'{"kind":"k","payload":{"n":2}}'
        reordered = b'{"payload":{"n":1},"kind":"k"}'
        for first in (slow, fast):  # whichever app made the job, both answer for it alike
            key = f"order-{len(answered)}"
            made = await first.post("/v1/jobs", body, headers_for(token, idempotency_key=key))
            assert made.status == 202
            for again in (body, reordered, other):
                expected = await slow.post("/v1/jobs", again, headers_for(token, idempotency_key=key))
                assert await fast.post("/v1/jobs", again, headers_for(token, idempotency_key=key)) == expected
                assert expected.status == (409 if again == other else 202)
                assert (expected.body == made.body) is (again != other)  # the same job, as first answered
        assert len(answered) == 1 + 3 + 3  # the fast app's submits, its 409s included
        assert db.count("jobs") == 2


def test_a_token_the_store_refuses_gets_the_routes_401_and_writes_nothing(
    pg_url: str, clock: FakeClock, db: Database, answered: list[str]
) -> None:
    asyncio.run(_refused_tokens(pg_url, clock, answered))
    assert db.count("jobs") == 0


async def _refused_tokens(pg_url: str, clock: FakeClock, answered: list[str]) -> None:
    async with asgi_client(pg_url, clock) as (fast, app), asgi_client(pg_url, clock, fast_submit=False) as (slow, _):
        store: Store = app.state.store
        revoked = new_token()
        store.revoke_token(store.create_token("acme", hash_token(revoked)).id)
        admin = new_token()
        store.create_token("ops", hash_token(admin), admin=True)
        for token in (new_token(), revoked, admin):
            expected = await slow.post("/v1/jobs", b'{"kind":"k"}', headers_for(token))
            assert expected.status == 401 and (b"content-type", PROBLEM) in expected.headers
            assert await fast.post("/v1/jobs", b'{"kind":"k"}', headers_for(token)) == expected
        assert len(answered) == 3


BAD_BODIES = [
    b'{"kind":',
    b"[]",
    b'"kind"',
    b"null",
    b'{"kind":"k","extra":1}',
    b'{"kind":""}',
    b'{"kind":"   "}',
    b'{"kind":"k","priority":"5"}',
    b'{"kind":"k","priority":true}',
    b'{"kind":"k","priority":2.5}',
    b'{"kind":"k","priority":1e400}',
    b'{"kind":"k","delay_seconds":NaN}',
    b'{"kind":"k","payload":[]}',
    b'{"kind":"k","payload":{"s":"\\u0000"}}',
    b'{"kind":"k","payload":{"s":"\\ud800"}}',
    b'{"kind":"\xff"}',
    b'{"kind":"k","payload":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"kind":"' + b"k" * 201 + b'"}',
]


def test_everything_else_gets_the_routes_4xx_and_writes_nothing(
    pg_url: str, clock: FakeClock, db: Database, answered: list[str]
) -> None:
    asyncio.run(_everything_else(pg_url, clock, answered))
    assert db.count("jobs") == 0


async def _everything_else(pg_url: str, clock: FakeClock, answered: list[str]) -> None:
    async with asgi_client(pg_url, clock) as (fast, app), asgi_client(pg_url, clock, fast_submit=False) as (slow, _):
        token = token_of(app.state.store)
        requests: list[tuple[str, bytes, list[tuple[bytes, bytes]]]] = [
            ("/v1/jobs", body, headers_for(token)) for body in BAD_BODIES
        ]
        good = b'{"kind":"k"}'
        requests += [
            ("/v1/jobs", b"", headers_for(token)),
            ("/v1/jobs", good, headers_for(None)),
            ("/v1/jobs", good, headers_for(token, "text/plain")),
            ("/v1/jobs", good, [(b"authorization", f"Bearer {token}".encode())]),  # no Content-Type
            ("/v1/jobs", good, [(b"content-type", b"application/json"), (b"authorization", f"Basic {token}".encode())]),
            ("/v1/jobs", good, [(b"content-type", b"application/json"), (b"authorization", b"Bearer " + b"x" * 201)]),
            ("/v1/jobs?queue=x", good, headers_for(token)),
            ("/v1/jobs", good, headers_for(token, idempotency_key="")),
            ("/v1/jobs", good, headers_for(token, idempotency_key="k" * 256)),
            ("/v1/jobs", good, headers_for(token, content_length="2000000")),  # over the body cap: 413
        ]
        for path, body, headers in requests:
            expected = await slow.post(path, body, headers)
            assert 400 <= expected.status < 500 and (b"content-type", PROBLEM) in expected.headers, (
                body[:80],
                expected,
            )
            assert await fast.post(path, body, headers) == expected, (path, body[:80], headers)
        assert answered == []


def test_a_job_the_store_refuses_gets_the_routes_422_and_writes_nothing(
    pg_url: str, clock: FakeClock, db: Database, answered: list[str]
) -> None:
    asyncio.run(_refused_by_the_store(pg_url, clock))
    assert answered == ["/v1/jobs"]  # the fast path asked the store, so it answered
    assert db.count("jobs") == 0


async def _refused_by_the_store(pg_url: str, clock: FakeClock) -> None:
    async with asgi_client(pg_url, clock) as (fast, app), asgi_client(pg_url, clock, fast_submit=False) as (slow, _):
        headers = headers_for(token_of(app.state.store), idempotency_key="nul\x00")  # valid to the schema, not storable
        expected = await slow.post("/v1/jobs", b'{"kind":"k"}', headers)
        assert expected.status == 422 and (b"content-type", PROBLEM) in expected.headers
        assert await fast.post("/v1/jobs", b'{"kind":"k"}', headers) == expected


def test_what_the_route_takes_that_the_fast_path_leaves_still_works(
    pg_url: str, clock: FakeClock, answered: list[str]
) -> None:
    asyncio.run(_left_but_accepted(pg_url, clock))
    assert answered == []


async def _left_but_accepted(pg_url: str, clock: FakeClock) -> None:
    async with asgi_client(pg_url, clock) as (fast, app), asgi_client(pg_url, clock, fast_submit=False) as (slow, _):
        token = token_of(app.state.store)
        for headers in (
            headers_for(token, "application/vnd.acme+json"),  # FastAPI reads +json types as JSON too
            headers_for(token, transfer_encoding="chunked"),
            headers_for(token, content_length="12", transfer_encoding="chunked"),
            headers_for(token, content_length="5"),  # a body longer than declared (no server passes one on)
        ):
            await submit_both(fast, slow, b'{"kind":"k"}', headers)


def test_a_client_that_leaves_mid_body_gets_no_answer_and_writes_nothing(
    pg_url: str, clock: FakeClock, db: Database
) -> None:
    asyncio.run(_leaving_client(pg_url, clock))
    assert db.count("jobs") == 0


async def _leaving_client(pg_url: str, clock: FakeClock) -> None:
    async with asgi_client(pg_url, clock) as (_, app):
        token = token_of(app.state.store)
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/jobs",
            "query_string": b"",
            "headers": headers_for(token, content_length="12"),
        }
        messages = [{"type": "http.request", "body": b'{"kind"', "more_body": True}, {"type": "http.disconnect"}]
        sent: list[Any] = []

        async def receive() -> dict[str, Any]:
            return messages.pop(0)

        async def send(message: Any) -> None:
            sent.append(message)

        assert app.fast_submit is not None
        assert await app.fast_submit.answer(scope, receive, send) is None
        assert sent == []


def test_an_outage_or_an_unexpected_error_is_the_routes_problem(
    pg_url: str, clock: FakeClock, answered: list[str]
) -> None:
    asyncio.run(_failures(pg_url, clock))
    assert answered == ["/v1/jobs"] * 2


async def _failures(pg_url: str, clock: FakeClock) -> None:
    async with (
        asgi_client(pg_url, clock) as (fast, app),
        asgi_client(pg_url, clock, fast_submit=False) as (slow, slow_app),
    ):
        token = token_of(app.state.store)
        outage = StoreUnavailable("PostgreSQL unavailable: connection to server at 10.1.2.3 failed")
        for error, status in ((outage, 503), (RuntimeError("secret internals"), 500)):
            # The route enqueues its job alone; the fast path's batch calls enqueue_many.
            with (
                mock.patch.object(slow_app.state.store, "enqueue", side_effect=error),
                mock.patch.object(app.state.store, "enqueue_many", side_effect=error),
            ):
                expected = await slow.post("/v1/jobs", b'{"kind":"k"}', headers_for(token))
                assert await fast.post("/v1/jobs", b'{"kind":"k"}', headers_for(token)) == expected
            assert expected.status == status and b"10.1.2.3" not in expected.body and b"secret" not in expected.body


def test_a_revoked_token_is_refused_on_the_very_next_submit(api: LiveApi, db: Database) -> None:
    token = api.token("acme")
    http = api.http(token)
    assert http.post("/v1/jobs", json={"kind": "k"}).status_code == 202
    (record,) = [t for t in api.store.list_tokens("acme") if t.revoked_at is None]

    api.store.revoke_token(record.id)

    assert_problem(http.post("/v1/jobs", json={"kind": "k"}), 401, "unauthorized")
    assert_problem(http.post("/v1/jobs", json={"kind": "k"}, headers={"Idempotency-Key": "k"}), 401)
    assert db.count("jobs") == 1


@pytest.mark.parametrize("poisoned", [False, True], ids=["valid", "one-refused"])
def test_concurrent_submits_share_store_calls_and_each_gets_its_own_answer(
    store_url: str, clock: FakeClock, db: Database, poisoned: bool
) -> None:
    asyncio.run(_concurrent_submits(store_url, clock, db, poisoned))


async def _concurrent_submits(store_url: str, clock: FakeClock, db: Database, poisoned: bool) -> None:
    async with asgi_client(store_url, clock) as (fast, app):
        store: Store = app.state.store
        acme, globex, revoked = token_of(store, "acme"), token_of(store, "globex"), new_token()
        store.revoke_token(store.create_token("acme", hash_token(revoked)).id)
        requests = [(acme, b'{"kind":"a","payload":{"n":%d}}' % n, {}) for n in range(30)]
        requests += [(globex, b'{"kind":"g"}', {}) for _ in range(10)]
        requests += [(revoked, b'{"kind":"r"}', {}) for _ in range(5)]
        requests += [(acme, b'{"kind":"k"}', {"idempotency_key": "same"}) for _ in range(5)]
        if poisoned:  # jobs the store refuses (refusing their token's batch): the others go again one by one
            requests += [(acme, b'{"kind":"nul"}', {"idempotency_key": "nul\x00"})]
            requests += [(acme, b'{"kind":"other"}', {"idempotency_key": "same"})]  # the key, for another job
        with mock.patch.object(store, "enqueue_many", wraps=store.enqueue_many) as enqueue_many:
            answers = await asyncio.gather(
                *(fast.post("/v1/jobs", body, headers_for(token, **more)) for token, body, more in requests)
            )
        by_kind: dict[bytes, list[Answer]] = {}
        for (_, body, _), answer in zip(requests, answers, strict=True):
            by_kind.setdefault(json.loads(body)["kind"].encode(), []).append(answer)
        assert {a.status for a in by_kind[b"a"] + by_kind[b"g"]} == {202}
        assert [db.job(json.loads(a.body)["job_id"])["tenant"] for a in by_kind[b"a"]] == ["acme"] * 30
        assert [db.job(json.loads(a.body)["job_id"])["tenant"] for a in by_kind[b"g"]] == ["globex"] * 10
        assert [json.loads(a.body)["kind"] for a in by_kind[b"a"]] == ["a"] * 30  # each its own job
        assert {a.status for a in by_kind[b"r"]} == {401}
        keyed = {json.loads(a.body)["job_id"] for a in by_kind[b"k"]}
        assert {a.status for a in by_kind[b"k"]} == {202} and len(keyed) == 1
        if poisoned:
            assert [a.status for a in by_kind[b"nul"] + by_kind[b"other"]] == [422, 409]
        else:  # all arrived before the first call returned: one batch, one call per token
            assert enqueue_many.call_count == 3
        assert db.count("jobs") == 30 + 10 + 1


def test_a_batch_takes_no_more_bodies_than_a_batch_request_may_carry() -> None:
    from service.api.coalesce import SUBMIT_BATCH, CoalescedSubmits, Submit
    from service.jobs import NewJob

    submits = CoalescedSubmits(store=mock.Mock(), max_batch_bytes=1_000)
    one = Submit(NewJob(kind="k"), None, 400)
    assert submits._batch_length([one] * 5) == 2
    assert submits._batch_length([Submit(NewJob(kind="k"), None, 5_000), one]) == 1  # one is always taken
    assert submits._batch_length([Submit(NewJob(kind="k"), None, 1)] * (SUBMIT_BATCH + 5)) == SUBMIT_BATCH
