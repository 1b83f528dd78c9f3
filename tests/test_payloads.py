"""The payload and text rules have one home (service.payloads): the API's request models
refuse what the store refuses, with the domain's own words."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from service.api.schemas import JobSubmit
from service.errors import InvalidInput
from service.jobs import NewJob
from service.payloads import dump_batch, dump_json, dump_values, storable_json, validate_new_job

UNSTORABLE: list[tuple[dict[str, Any], str]] = [
    ({"kind": "a\u0000b"}, "kind must not contain the NUL character"),
    ({"kind": "x", "queue": "q\u0000"}, "queue must not contain the NUL character"),
    ({"kind": "x", "concurrency_key": "c\u0000"}, "concurrency_key must not contain the NUL character"),
    ({"kind": "x", "payload": {"s": ["a\u0000"]}}, "payload must not contain the NUL character"),
    ({"kind": "x", "payload": {"k\ud800": 1}}, "payload must be valid Unicode"),
    ({"kind": "x", "payload": {"n": float("nan")}}, "payload is not JSON-serialisable"),
    ({"kind": "x", "payload": {"n": [float("inf")]}}, "payload is not JSON-serialisable"),
]


def _domain_verdict(fields: dict[str, Any]) -> str | None:
    job = NewJob(**fields)
    try:
        validate_new_job(job)
        dump_json(job.payload, "payload")
    except InvalidInput as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(("fields", "message"), UNSTORABLE)
def test_the_api_model_refuses_what_the_domain_refuses_in_its_words(fields: dict[str, Any], message: str):
    verdict = _domain_verdict(fields)
    assert verdict is not None and verdict.startswith(message)
    with pytest.raises(ValidationError) as refused:
        JobSubmit.model_validate(fields)
    assert [error["msg"].removeprefix("Value error, ") for error in refused.value.errors()] == [verdict]


def test_a_storable_job_passes_both():
    fields = {"kind": "x", "queue": "q", "payload": {"s": "ok \u00e9", "n": [1.5, None, True]}}
    assert _domain_verdict(fields) is None
    assert JobSubmit.model_validate(fields).to_new_job("t", None).payload == fields["payload"]


# Text that JSON escapes (\uXXXX) yet both databases store: the batch encoders look
# closer at escaped text and must not refuse it.
STORABLE_ESCAPED: list[Any] = [
    {"s": "żółw ✓"},
    {"emoji \U0001f600": ["\U0001f600"]},  # a surrogate pair in JSON, one character in Python
    {"s": "\\u0000 and \\ud800 as typed: a backslash, then letters"},
    {"s": "\x01\x1f"},
]


@pytest.mark.parametrize("values", [STORABLE_ESCAPED, [{}, {"n": 1}]])
def test_the_batch_encoders_take_what_dump_json_takes(values: list[Any]):
    assert dump_values(values, "payload") == [dump_json(value, "payload") for value in values]
    rows = [{"id": i, "payload": value} for i, value in enumerate(values)]
    assert json.loads(dump_batch(rows, values, "payload")) == rows


@pytest.mark.parametrize(
    "values",
    [
        [{}, {"s": "a\u0000b"}, {"n": float("nan")}],  # storable_json's refusal comes first...
        [{}, {"n": float("nan")}, {"s": "a\u0000b"}],  # ...whichever job holds it
        [{"when": object()}, {"k\ud800": 1}],
        [{"ok": "é"}, {"when": object()}, {"n": [float("inf")]}],
        [{"deep": [{"x": "\ud800"}]}],
    ],
)
def test_the_batch_encoders_refuse_in_the_words_of_dump_json_for_each_value_in_turn(values: list[Any]):
    """The error dump_json raises for the first value storable_json refuses, else for the first
    value that is not JSON: what a batch said when every payload was walked before encoding."""
    expected = None
    for check in (storable_json, dump_json):
        for value in values:
            try:
                check(value, "payload")
            except InvalidInput as exc:
                expected = str(exc)
                break
        if expected:
            break
    assert expected
    with pytest.raises(InvalidInput) as refused:
        dump_values(values, "payload")
    assert str(refused.value) == expected
    with pytest.raises(InvalidInput) as refused:
        dump_batch([{"payload": value} for value in values], values, "payload")
    assert str(refused.value) == expected


def test_an_idempotency_key_is_visible_ascii_wherever_it_comes_from() -> None:
    from service.errors import InvalidInput
    from service.jobs import NewJob
    from service.payloads import check_idempotency_key, validate_new_job

    assert check_idempotency_key("invoice-42:2026/12~x") == "invoice-42:2026/12~x"
    for bad in ("caf\u00e9", "a b", "tab\t", "\x7f", ""):
        with pytest.raises(InvalidInput):
            check_idempotency_key(bad)
        with pytest.raises(InvalidInput, match="idempotency_key"):
            validate_new_job(NewJob(kind="k", idempotency_key=bad))  # the store, the CLI and Queue call this


def nested(depth: int) -> dict[str, Any]:
    """An object ``depth`` objects and arrays deep (``{}`` is 1): objects at odd levels, arrays between."""
    value: Any = {} if depth % 2 else []
    for level in range(depth - 1, 0, -1):
        value = {"a": value} if level % 2 else [value]
    return value  # type: ignore[no-any-return]


def test_nested_counts_objects_and_arrays() -> None:
    assert nested(1) == {} and nested(2) == {"a": []} and nested(3) == {"a": [{}]}


def test_every_encoder_takes_a_value_at_the_depth_bound_and_refuses_one_level_more() -> None:
    from service.payloads import MAX_JSON_DEPTH

    deepest, deeper = nested(MAX_JSON_DEPTH), nested(MAX_JSON_DEPTH + 1)
    assert storable_json(deepest, "payload") is deepest
    assert json.loads(dump_json(deepest, "payload")) == deepest
    assert dump_values([deepest], "payload") == [dump_json(deepest, "payload")]
    assert json.loads(dump_batch([{"payload": deepest}], [deepest], "payload")) == [{"payload": deepest}]
    for encode in (
        lambda: storable_json(deeper, "payload"),
        lambda: dump_json(deeper, "payload"),
        lambda: dump_values([{}, deeper], "payload"),
        lambda: dump_batch([{"payload": {}}, {"payload": deeper}], [{}, deeper], "payload"),
    ):
        with pytest.raises(InvalidInput, match=f"payload is nested more than {MAX_JSON_DEPTH} objects and arrays"):
            encode()


def test_a_value_too_deep_for_the_json_encoder_is_refused_as_too_deep_not_a_recursion_error() -> None:
    """Python's C encoder recurses: ~1,000 levels raised RecursionError through the stores."""
    deep = nested(5_000)
    for encode in (
        lambda: dump_json(deep, "payload"),
        lambda: dump_values([deep], "payload"),
        lambda: dump_batch([{"payload": deep}], [deep], "payload"),
    ):
        with pytest.raises(InvalidInput, match="nested more than 64"):
            encode()


def test_a_wide_shallow_batch_is_not_mistaken_for_a_deep_one() -> None:
    """dump_batch walks only when the brackets could nest too deep: many shallow payloads pass."""
    payloads = [{"list": [[1], [2]], "n": i} for i in range(500)]
    assert json.loads(dump_batch([{"payload": p} for p in payloads], payloads, "payload"))[499]["payload"]["n"] == 499


def test_the_payload_size_bound_is_on_compact_json_and_names_the_job_of_a_batch() -> None:
    from service.errors import PayloadTooLarge
    from service.payloads import dump_payload_batch, dump_payloads

    limit = 2_048
    at = {"s": "x" * (limit - len('{"s":""}'))}
    over = {"s": "x" * (limit + 1 - len('{"s":""}'))}
    accent = {"s": "\u00e9" * ((limit - 8) // 6)}  # 6 bytes each as stored (\u00e9): counted as stored
    assert dump_payloads([at, accent], limit) == [dump_json(at, "payload"), dump_json(accent, "payload")]
    rows = [{"payload": at}, {"payload": at}]  # the batch's text is over the limit, each payload is not
    assert json.loads(dump_payload_batch(rows, [at, at], limit)) == rows
    with pytest.raises(PayloadTooLarge, match=rf"^payload is {limit + 1} bytes of JSON, over the limit of {limit}"):
        dump_payloads([over], limit)
    with pytest.raises(PayloadTooLarge, match=r"^jobs\[1\]\.payload is .* \(JOBQ_MAX_BODY_BYTES\)"):
        dump_payloads([at, over], limit)
    with pytest.raises(PayloadTooLarge, match=r"^jobs\[1\]\.payload"):
        dump_payload_batch([{"payload": at}, {"payload": over}], [at, over], limit)
    with pytest.raises(PayloadTooLarge):
        dump_payloads([{"s": "\u00e9" * ((limit - 8) // 6 + 1)}], limit)
