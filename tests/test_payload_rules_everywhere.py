"""One set of rules on every way in (issue 26): a payload or an idempotency key at a bound is
taken by every path, one just past it is refused by every path, and every payload taken renders
on the console's job page.

Hypothesis draws payloads at and just past each bound (the size, JOBQ_MAX_BODY_BYTES, counted as
the stored compact JSON; the depth, MAX_JSON_DEPTH; text no database stores: NUL, lone
surrogates; numbers JSON has not) and idempotency keys at and past theirs (MAX_KEY_LENGTH, visible
ASCII), and sends each through the API's single submit (its fast entrance, and the route behind
it, which a chunked body takes), the API's batch, ``jobq enqueue`` (its real ``main``, in this
process: a subprocess per example would cost the budget) and ``Queue``. Every path must agree
with the others and with the rules as written here, a path that takes the job must store it as
sent, and the console (the app's ASGI app, logged in with a session) must answer its job page
with a 200. Before the rules had one home, the CLI took a 2 MB payload the API refused and the
job page of a payload 943 levels deep answered 500.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from service.app import create_app
from service.cli.app import main as jobq_main
from service.client import Client
from service.config import Settings
from service.errors import InvalidInput
from service.jobs import JobQuery, NewJob
from service.payloads import MAX_JSON_DEPTH, MAX_KEY_LENGTH
from service.queue import Queue
from service.store import Store
from service.tokens import hash_token, new_token
from tests.api.asgi import AsgiHttp, log_in_operator
from tests.api.conftest import run_api
from tests.conftest import build_store
from tests.store.builders import claim_one
from tests.test_payloads import nested

LIMIT = 2_048
"""JOBQ_MAX_BODY_BYTES for this test: small, so payloads at the bound are cheap to send."""
KIND = "rules"
_EMPTY = len('{"s":""}')
_tenants = itertools.count()


# -- what the rules say, written out independently of service.payloads ------------------------


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0  # drawn values are at most MAX_JSON_DEPTH + 1 deep: recursion is safe here


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def numbers(value: Any) -> Iterator[float]:
    if isinstance(value, float):
        yield value
    elif isinstance(value, dict | list):
        for item in value.values() if isinstance(value, dict) else value:
            yield from numbers(item)


def storable(text: str) -> bool:
    return "\x00" not in text and not any("\ud800" <= char <= "\udfff" for char in text)


def expected(payload: dict[str, Any], key: str | None) -> bool:
    """Accepted by the rules: a payload of at most LIMIT bytes of compact JSON (non-ASCII
    escaped, as stored), at most MAX_JSON_DEPTH deep, storable strings, finite numbers; a key
    of 1 to MAX_KEY_LENGTH visible ASCII characters."""
    if depth(payload) > MAX_JSON_DEPTH:
        return False
    if not all(storable(text) for text in strings(payload)) or not all(map(math.isfinite, numbers(payload))):
        return False
    if len(json.dumps(payload, separators=(",", ":"), ensure_ascii=True)) > LIMIT:
        return False
    return key is None or (0 < len(key) <= MAX_KEY_LENGTH and all("!" <= char <= "~" for char in key))


# -- what is drawn -------------------------------------------------------------------------


def sized(target: int, accented: bool) -> dict[str, Any]:
    """``{"s": ...}`` whose compact JSON, as stored, is ``target`` bytes (an é is stored as 6: \\u00e9)."""
    room = target - _EMPTY
    accents = room // 6 if accented else 0
    return {"s": "\u00e9" * accents + "x" * (room - 6 * accents)}


def deep(levels: int, leaf: Any) -> dict[str, Any]:
    value = nested(levels)
    innermost = value
    while innermost:  # down the single path to the innermost container, which is empty
        innermost = innermost["a"] if isinstance(innermost, dict) else innermost[0]
    if isinstance(innermost, list):
        innermost.append(leaf)
    else:
        innermost["leaf"] = leaf
    return value


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(-1e15, 1e15, allow_subnormal=False)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=6)
)
unstorable = st.sampled_from(["\x00", "a\x00", "\ud800", "x\udfff", "\udc80y"])
odd_numbers = st.sampled_from([math.nan, math.inf, -math.inf])
plain_json = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)

payloads = st.one_of(
    st.builds(sized, st.sampled_from([LIMIT - 1, LIMIT, LIMIT + 1]), st.booleans()),
    st.builds(deep, st.sampled_from([MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1]), scalars),
    st.builds(lambda text, value: {"s": [value, text]}, unstorable, plain_json),
    st.builds(lambda text, value: {text: value}, unstorable, plain_json),
    st.builds(lambda number, value: {"n": [value, number]}, odd_numbers, plain_json),
    st.dictionaries(st.text(max_size=4), plain_json, max_size=4),
)

# A key is drawn as its length and, maybe, one character the alphabet does not allow, set in its
# middle: a header's value loses leading and trailing blanks on the way, a body's does not.
keys = st.one_of(
    st.none(),
    st.tuples(st.sampled_from([12, MAX_KEY_LENGTH - 1, MAX_KEY_LENGTH, MAX_KEY_LENGTH + 1]), st.none()),
    st.tuples(st.just(12), st.sampled_from([" ", "\t", "\x7f", "\u00e9", "\u2603", "\x01"])),
    st.tuples(st.just(12), st.characters(min_codepoint=0x21, max_codepoint=0x7E)),
    st.just(""),
)


def key_for(drawn: tuple[int, str | None] | str | None, tag: str) -> str | None:
    """The drawn key for one path: unique to the example and the path (its first characters), so no
    path finds another's job under its key, and of the drawn length and alphabet."""
    if drawn is None or drawn == "":
        return drawn  # type: ignore[return-value]
    assert isinstance(drawn, tuple)
    length, odd = drawn
    stem = f"{tag}{next(_tenants):07d}"
    middle = "" if odd is None else odd
    return stem + middle + "k" * (length - len(stem) - len(middle))


# -- the paths -----------------------------------------------------------------------------


@dataclass
class Ways:
    """Everything the paths need, opened once for the whole run."""

    http: AsgiHttp
    store: Store

    def token(self, tenant: str) -> str:
        token = new_token()
        self.store.create_token(tenant, hash_token(token), name="rules")
        return token


def body(fields: dict[str, Any]) -> bytes:
    # ASCII JSON: a lone surrogate goes as its escape (valid JSON text, which the server reads back
    # into the same str), NaN as the token Python's json writes.
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=True).encode()


def by_http(ways: Ways, token: str, payload: dict[str, Any], key: str | None, *, chunked: bool) -> uuid.UUID | None:
    headers: dict[str, Any] = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key.encode("utf-8")
    content = body({"kind": KIND, "payload": payload})
    answer = ways.http.post("/v1/jobs", content=content, headers=headers, chunked=chunked)
    assert answer.status_code in (202, 413, 422), (answer.status_code, answer.text[:300])
    return uuid.UUID(answer.json()["job_id"]) if answer.status_code == 202 else None


def by_batch(ways: Ways, token: str, payload: dict[str, Any], key: str | None) -> uuid.UUID | None:
    job: dict[str, Any] = {"kind": KIND, "payload": payload}
    if key is not None:
        job["idempotency_key"] = key
    answer = ways.http.post(
        "/v1/jobs/batch",
        content=body({"jobs": [job]}),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert answer.status_code in (202, 413, 422), (answer.status_code, answer.text[:300])
    return uuid.UUID(answer.json()["jobs"][0]["job_id"]) if answer.status_code == 202 else None


def by_cli(tenant: str, payload: dict[str, Any], key: str | None) -> uuid.UUID | None:
    args = ["enqueue", KIND, "--tenant", tenant, "--payload", body(payload).decode()]
    if key is not None:
        args += ["--idempotency-key", key]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as ended:
        jobq_main(args)
    if ended.value.code == 0:
        return uuid.UUID(out.getvalue().strip())
    lines = err.getvalue().splitlines()
    assert ended.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (ended.value.code, lines)
    return None


def by_queue(ways: Ways, tenant: str, payload: dict[str, Any], key: str | None) -> uuid.UUID | None:
    queue = Queue(store=ways.store, tenant=tenant)
    try:
        return queue.enqueue(KIND, payload, idempotency_key=key).id
    except InvalidInput:
        return None


@pytest.fixture
def ways(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ways]:
    monkeypatch.setenv("JOBQ_DATABASE_URL", store_url)  # what `jobq` reads
    monkeypatch.setenv("JOBQ_MAX_BODY_BYTES", str(LIMIT))
    for name in [name for name in os.environ if name.startswith("JOBQ_") and name not in ("JOBQ_DATABASE_URL",)]:
        if name != "JOBQ_MAX_BODY_BYTES":
            monkeypatch.delenv(name)
    store = build_store(store_url, max_body_bytes=LIMIT)
    app = create_app(Settings(database_url=store_url, max_body_bytes=LIMIT))
    with AsgiHttp(app) as http:
        ways = Ways(http, store)
        log_in_operator(http, store)
        yield ways
    store.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=payloads, drawn_key=keys)
@example(payload=sized(LIMIT, False), drawn_key=None)
@example(payload=sized(LIMIT + 1, False), drawn_key=None)
@example(payload=sized(LIMIT, True), drawn_key=None)
@example(payload=sized(LIMIT + 1, True), drawn_key=None)
@example(payload=nested(MAX_JSON_DEPTH), drawn_key=None)
@example(payload=nested(MAX_JSON_DEPTH + 1), drawn_key=None)
@example(payload={"s": "a\x00b"}, drawn_key=None)
@example(payload={"\ud800": 1}, drawn_key=None)
@example(payload={"n": math.nan}, drawn_key=None)
@example(payload={}, drawn_key=(MAX_KEY_LENGTH, None))
@example(payload={}, drawn_key=(MAX_KEY_LENGTH + 1, None))
@example(payload={}, drawn_key=(12, "\u00e9"))
@example(payload={}, drawn_key=(12, " "))
@example(payload={}, drawn_key="")
def test_every_way_in_takes_or_refuses_alike_and_the_console_shows_what_was_taken(
    ways: Ways, payload: dict[str, Any], drawn_key: tuple[int, str | None] | str | None
) -> None:
    tenant = f"rules-{next(_tenants)}"
    token = ways.token(tenant)
    taken = {
        "http": by_http(ways, token, payload, key_for(drawn_key, "h"), chunked=False),
        "http (route)": by_http(ways, token, payload, key_for(drawn_key, "r"), chunked=True),
        "batch": by_batch(ways, token, payload, key_for(drawn_key, "b")),
        "cli": by_cli(tenant, payload, key_for(drawn_key, "c")),
        "queue": by_queue(ways, tenant, payload, key_for(drawn_key, "q")),
    }
    verdict = expected(payload, key_for(drawn_key, "x"))
    event("taken" if verdict else "refused")
    assert {way: job is not None for way, job in taken.items()} == dict.fromkeys(taken, verdict)
    stored = ways.store.list_jobs(JobQuery(tenant=tenant, limit=10)).items
    assert sorted(job.id for job in stored) == sorted(job_id for job_id in taken.values() if job_id is not None)
    for way, job_id in taken.items():
        if job_id is None:
            continue
        assert ways.store.get_payload(job_id) == payload, way
        page = ways.http.get(f"/ui/jobs/{job_id}")
        assert page.status_code == 200, (way, page.status_code, page.text[:300])


def test_every_reader_shows_a_payload_and_a_result_at_the_depth_bound(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the writers take, the readers show: the console's job page and its result link,
    `jobq result`, and the HTTP client (against a real server), for a payload and a result
    MAX_JSON_DEPTH deep; one level more is refused where a result is written."""
    deepest = nested(MAX_JSON_DEPTH)
    api = run_api(Settings(database_url=store_url))
    try:
        store = api.store
        job = store.enqueue(NewJob(kind=KIND, payload=deepest))
        claimed = claim_one(store)
        with pytest.raises(InvalidInput, match="nested more than"):
            store.complete(claimed.lease, nested(MAX_JSON_DEPTH + 1))
        store.complete(claimed.lease, deepest)

        with AsgiHttp(create_app(Settings(database_url=store_url))) as http:
            log_in_operator(http, store)
            assert http.get(f"/ui/jobs/{job.id}").status_code == 200
            assert http.get(f"/ui/jobs/{job.id}/result").json()["result"] == deepest

        monkeypatch.setenv("JOBQ_DATABASE_URL", store_url)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as ended:
            jobq_main(["result", str(job.id)])
        assert ended.value.code == 0 and json.loads(out.getvalue()) == deepest

        with Client(api.url, api.token("default")) as client:
            assert client.result(job.id) == deepest
    finally:
        api.stop()
