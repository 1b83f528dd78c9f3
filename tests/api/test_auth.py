"""Authentication (the same 401 for every bad token) and tenant isolation (another tenant's job is a 404)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from service.tokens import TOKEN_BYTES, hash_token, new_token
from tests.api.conftest import LiveApi
from tests.api.problems import assert_problem
from tests.conftest import Database


def test_tokens_are_long_random_and_stored_only_as_a_hash(api: LiveApi, db: Database) -> None:
    token = api.token("acme")
    assert token.startswith("jobq_") and len(token) >= len("jobq_") + (TOKEN_BYTES * 4 + 2) // 3
    assert new_token() != new_token()
    stored = db.rows("SELECT tenant, token_hash FROM api_tokens")
    assert stored == [{"tenant": "acme", "token_hash": hash_token(token)}]
    assert token not in str(db.rows("SELECT * FROM api_tokens"))


def _every_kind_of_bad_authorization(api: LiveApi, db: Database) -> dict[str, dict[str, str]]:
    revoked = api.token("acme")
    token_id = db.scalar("SELECT id FROM api_tokens WHERE token_hash = %(h)s", h=hash_token(revoked))
    api.store.revoke_token(uuid.UUID(str(token_id)))
    admin = new_token()
    api.store.create_token("", hash_token(admin), "operator", admin=True)  # the console's, never /v1's
    return {
        "admin": {"Authorization": f"Bearer {admin}"},
        "missing": {},
        "unknown": {"Authorization": f"Bearer {new_token()}"},
        "revoked": {"Authorization": f"Bearer {revoked}"},
        "not bearer": {"Authorization": f"Basic {revoked}"},
        "no token": {"Authorization": "Bearer"},
        "overlong": {"Authorization": "Bearer " + "x" * 5000},
    }


def test_missing_bad_and_revoked_tokens_get_the_same_401(api: LiveApi, db: Database) -> None:
    job = api.http(api.token("acme")).post("/v1/jobs", json={"kind": "x"}).json()
    http = api.http()
    requests: list[tuple[str, str, dict[str, Any] | None]] = [
        ("POST", "/v1/jobs", {"kind": "x"}),
        ("POST", "/v1/jobs/batch", {"jobs": [{"kind": "x"}]}),
        ("GET", f"/v1/jobs/{job['job_id']}", None),
        ("GET", f"/v1/jobs/{job['job_id']}/result", None),
        ("POST", f"/v1/jobs/{job['job_id']}/cancel", None),
        ("GET", "/v1/jobs", None),
    ]
    bodies = set()
    for name, headers in _every_kind_of_bad_authorization(api, db).items():
        for method, path, body in requests:
            response = http.request(method, path, json=body, headers=headers)
            problem = assert_problem(response, 401, "unauthorized")
            assert response.headers["WWW-Authenticate"] == "Bearer", name
            bodies.add(response.content)
            assert "jobq token create" in problem["detail"]
    assert len(bodies) == 1  # nothing tells a missing token from a revoked one
    assert db.count("jobs") == 1
    assert db.job(job["job_id"])["state"] == "queued"


def test_health_endpoints_need_no_token(api: LiveApi) -> None:
    http = api.http()
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").json() == {"status": "ready"}


def test_another_tenants_job_is_a_404_exactly_like_a_missing_one(api: LiveApi, db: Database) -> None:
    acme, globex = api.http(api.token("acme")), api.http(api.token("globex"))
    job_id = acme.post("/v1/jobs", json={"kind": "x", "payload": {"secret": 1}}).json()["job_id"]
    missing_id = str(uuid.uuid4())
    for suffix, method in (("", "GET"), ("/result", "GET"), ("/cancel", "POST"), ("?wait=0.5", "GET")):
        theirs = globex.request(method, f"/v1/jobs/{job_id}{suffix}")
        missing = globex.request(method, f"/v1/jobs/{missing_id}{suffix}")
        assert_problem(theirs, 404, "not-found")
        assert theirs.content == missing.content.replace(missing_id.encode(), job_id.encode())
        # The same headers, but for the length of the id's text and the clock's second.
        same = {"content-length": "-", "date": "-"}
        assert dict(theirs.headers) | same == dict(missing.headers) | same
        assert "secret" not in theirs.text
    assert globex.get("/v1/jobs").json() == {"items": [], "next_cursor": None}
    assert [j["job_id"] for j in acme.get("/v1/jobs").json()["items"]] == [job_id]
    assert db.job(job_id)["state"] == "queued"  # globex's cancel changed nothing


def test_a_tenants_list_never_shows_another_tenants_jobs(api: LiveApi) -> None:
    acme, globex = api.http(api.token("acme")), api.http(api.token("globex"))
    mine = {acme.post("/v1/jobs", json={"kind": "x"}).json()["job_id"] for _ in range(3)}
    theirs = {globex.post("/v1/jobs", json={"kind": "x"}).json()["job_id"] for _ in range(2)}
    listed = {j["job_id"] for j in acme.get("/v1/jobs", params={"limit": 200}).json()["items"]}
    assert listed == mine and not listed & theirs


def test_auth_off_serves_one_default_tenant_and_warns(
    start_api: Any, store_url: str, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="jobq.api"):
        api = start_api(store_url, auth=False)
    assert any("JOBQ_AUTH=off" in record.getMessage() for record in caplog.records)
    http = api.http()  # no token at all
    job = http.post("/v1/jobs", json={"kind": "x"})
    assert job.status_code == 202
    assert db.job(job.json()["job_id"])["tenant"] == "default"
    assert http.get(f"/v1/jobs/{job.json()['job_id']}").status_code == 200
