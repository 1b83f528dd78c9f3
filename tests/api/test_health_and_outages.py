"""Health checks, and what a client sees when the database or the code fails."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from unittest import mock

import pytest

from service.errors import StoreUnavailable
from tests.api.conftest import LiveApi
from tests.api.problems import assert_problem
from tests.conftest import PostgresServer


def test_readyz_is_503_until_the_schema_is_migrated(
    start_api: Callable[..., LiveApi], postgres_server: PostgresServer
) -> None:
    name = postgres_server.new_name("unmigrated")
    url = postgres_server.create_database(name)
    try:
        api = start_api(url)
        http = api.http()
        assert http.get("/healthz").json() == {"status": "ok"}
        problem = assert_problem(http.get("/readyz"), 503, "schema-mismatch")
        assert problem["schema"] == "behind" and "run `jobq migrate`" in problem["detail"], problem
        from service.store.migrate import upgrade

        upgrade(url)
        assert http.get("/readyz").json() == {"status": "ready"}
        api.stop()
    finally:
        postgres_server.drop_database(name)


def test_a_database_outage_is_a_503_with_retry_after_and_no_internals(api: LiveApi) -> None:
    http = api.http(api.token())
    outage = StoreUnavailable("PostgreSQL unavailable: connection to server at 10.1.2.3 failed")
    with mock.patch.object(api.store, "get", side_effect=outage):
        response = http.get(f"/v1/jobs/{uuid.uuid4()}")
    problem = assert_problem(response, 503, "unavailable")
    assert response.headers["Retry-After"] == "1"
    assert "10.1.2.3" not in response.text and "nothing was changed" in problem["detail"]


def test_an_unexpected_error_is_a_500_problem_that_hides_the_details(
    api: LiveApi, caplog: pytest.LogCaptureFixture
) -> None:
    http = api.http(api.token())
    with mock.patch.object(api.store, "list_jobs", side_effect=RuntimeError("secret internals")):
        response = http.get("/v1/jobs")
    assert_problem(response, 500, "internal")
    assert "secret" not in response.text
    assert any("secret internals" in str(record.exc_info) for record in caplog.records if record.exc_info)
