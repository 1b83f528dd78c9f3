"""Property-based: schemathesis generates requests from /openapi.json against the real API.

No answer may be a 5xx, and every answer must match the schema the API
publishes (status code, content type, headers, body). Bounded: a fixed number
of examples per operation, so the run stays well under two minutes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, settings

from service.app import create_app
from service.config import Settings
from tests.api.conftest import LiveApi, run_api
from tests.conftest import PostgresServer

pytestmark = pytest.mark.slow

EXAMPLES_PER_OPERATION = 30


@pytest.fixture(scope="module")
def live_api(postgres_server: PostgresServer, pg_template: str) -> Iterator[LiveApi]:
    """One API and one database for every operation: starting one per operation costs more than the tests."""
    name = postgres_server.new_name("schemathesis")
    api = run_api(Settings(database_url=postgres_server.create_database(name, template=pg_template)))
    yield api
    api.stop()
    postgres_server.drop_database(name)


@pytest.fixture(scope="module")
def http_session() -> Iterator[requests.Session]:
    """One client session for the run, closed at the end (a session per call leaks its sockets)."""
    session = requests.Session()
    yield session
    session.close()


# The published schema, built without a server (create_app has no side effects);
# each operation's test then calls a live API on a fresh database.
schema = schemathesis.openapi.from_dict(create_app(Settings(database_url="sqlite:///unused.db")).openapi())


def _storable(value: Any) -> Any:
    """The API refuses text no database can hold (NUL, lone surrogates), as its schema says
    in words; JSON Schema cannot say it, so generated bodies are cleaned of it here.

    Each such character becomes one other character (U+FFFD, "?"), never nothing: lengths
    and patterns then judge the text as they did, and a case stays as valid or as invalid as
    it was generated (a NUL removed could empty a name, a key removed could drop an unknown
    parameter, and the API would be blamed for the test's edit)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable(item) for item in value]
    return value


def _earlier_positions(body: Any) -> Any:
    """A batch's job may depend on an earlier job of the batch only (so no cycle can be written),
    a rule JSON Schema cannot say: a generated position is moved to an earlier one, and the first
    job's are dropped, so a case stays as valid or as invalid as it was otherwise."""
    if not isinstance(body, dict) or not isinstance(body.get("jobs"), list):
        return body
    for place, job in enumerate(body["jobs"]):
        if isinstance(job, dict) and isinstance(job.get("depends_on"), list):
            job["depends_on"] = [
                {"index": parent["index"] % place} if isinstance(parent, dict) else parent
                for parent in job["depends_on"]
                if not (isinstance(parent, dict) and place == 0)
            ]
    return body


@schema.hook
def map_body(context: Any, body: Any) -> Any:
    return _storable(body)


@schema.hook
def map_query(context: Any, query: Any) -> Any:
    """Filters are text too (``?kind=`` with a NUL is a 422 on PostgreSQL), cleaned as bodies are;
    and long polls that hold a request for up to 30 s would only spend the time budget."""
    query = _storable(query)
    if isinstance(query, dict) and isinstance(query.get("wait"), int | float) and query["wait"] > 0.2:
        query = {**query, "wait": 0.2}
    return query


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    derandomize=True,  # the same cases every run: a red build reproduces
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_the_api_never_fails_and_always_matches_its_schema(
    case: Any, live_api: LiveApi, http_session: requests.Session
) -> None:
    token = getattr(live_api, "_schemathesis_token", None) or live_api.token("schemathesis")
    live_api._schemathesis_token = token  # type: ignore[attr-defined]
    case.body = _earlier_positions(case.body)  # on the case itself, so a case of every phase gets it
    case.call_and_validate(base_url=live_api.url, session=http_session, headers={"Authorization": f"Bearer {token}"})
