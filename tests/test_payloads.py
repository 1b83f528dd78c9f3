"""The payload and text rules have one home (service.payloads): the API's request models
refuse what the store refuses, with the domain's own words."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from service.api.schemas import JobSubmit
from service.errors import InvalidInput
from service.jobs import NewJob
from service.payloads import dump_json, validate_new_job

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
