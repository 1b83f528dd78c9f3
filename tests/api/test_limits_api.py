"""``GET /v1/limits``: a tenant sees the limits that apply to it as a tenant, and its own counter."""

from __future__ import annotations

from service.limits import Limit, parse_rate
from service.store import Store
from tests.api.conftest import LiveApi
from tests.api.problems import assert_problem


def test_a_tenant_sees_its_own_scopes_only(api: LiveApi, owner_store: Store) -> None:
    owner_store.set_limit(Limit("tenant:*", concurrency=2))
    owner_store.set_limit(Limit("tenant:acme", weight=3))
    owner_store.set_limit(Limit("tenant:other", concurrency=9))
    rate, per = parse_rate("60/min")
    owner_store.set_limit(Limit("kind:call_model", rate=rate, per_seconds=per))
    http = api.http(api.token("acme"))
    http.post("/v1/jobs", json={"kind": "x", "payload": {}})

    body = http.get("/v1/limits").json()

    assert body == {
        "limits": [
            {"scope": "tenant:*", "concurrency": 2, "rate": None, "weight": None},
            {"scope": "tenant:acme", "concurrency": None, "rate": None, "weight": 3.0},
        ],
        "scopes": [{"scope": "tenant:acme", "running": 0, "concurrency": 2, "rate": None}],
    }
    assert_problem(api.http(None).get("/v1/limits"), 401)
    assert_problem(http.get("/v1/limits?scope=kind:x"), 422)
