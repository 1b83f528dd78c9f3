"""Assertions on problem details, shared by the API tests."""

from __future__ import annotations

from typing import Any

import httpx

PROBLEM = "application/problem+json"


def assert_problem(response: httpx.Response, status: int, slug: str | None = None) -> dict[str, Any]:
    """The response is an RFC 9457 problem with this status (and type), with a detail to act on."""
    assert response.status_code == status, f"{response.status_code}: {response.text}"
    assert response.headers["content-type"] == PROBLEM, response.headers
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["type"].startswith("urn:jobq:problem:")
    if slug is not None:
        assert body["type"] == f"urn:jobq:problem:{slug}", body
    assert body["title"]
    assert isinstance(body["detail"], str) and len(body["detail"]) > 10, body
    return body
