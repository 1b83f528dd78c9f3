"""A PostgreSQL restart under a running API: once the server answers again, no request gets a 5xx.

Every connection in the API's pool dies with the old server (it said goodbye, FATAL 57P01, and
hung up while the connection sat idle). The store drops such a connection when it is checked
out, before any statement is sent, and a read whose connection breaks under it anyway is run
once more on a fresh one (service/store/postgres/connection.py). The server is a private cluster
(tests/private_postgres.py): the shared test server is never restarted."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx

from service.store import migrate
from tests.api.conftest import LiveApi
from tests.console.conftest import admin_token
from tests.private_postgres import PrivateServer, private_server  # noqa: F401 (the fixture)


def console_login(api: LiveApi, token: str) -> httpx.Response:
    with api.http(follow_redirects=False) as browser:
        page = browser.get("/ui/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert page.status_code == 200 and csrf is not None, page.text[:500]
        return browser.post("/ui/login", data={"csrf": csrf.group(1), "token": token, "next": "/ui/jobs"})


def test_no_5xx_after_a_database_restart_completes(
    private_server: PrivateServer,  # noqa: F811
    start_api: Callable[..., LiveApi],
) -> None:
    migrate.upgrade(private_server.url)
    api = start_api(private_server.url)
    operator = admin_token(api)
    http = api.http(api.token())
    job = http.post("/v1/jobs", json={"kind": "sleep", "payload": {}}).json()["job_id"]

    # Fill the pool: concurrent reads make it open all its connections, which then sit idle.
    with httpx.Client(base_url=api.url, headers=http.headers) as client, ThreadPoolExecutor(8) as threads:
        assert {
            r.status_code for r in threads.map(lambda _: client.get("/v1/jobs", params={"limit": 100}), range(32))
        } == {200}
    assert console_login(api, operator).status_code == 303

    private_server.restart()  # returns once the new server accepts connections
    restarted = time.monotonic()

    answers = [
        ("console login", console_login(api, operator)),
        ("console login again", console_login(api, operator)),
        ("GET /v1/jobs", http.get("/v1/jobs")),
        ("GET /v1/jobs again", http.get("/v1/jobs")),
        ("GET /v1/jobs/{id}", http.get(f"/v1/jobs/{job}")),
        ("GET /v1/jobs/{id}?wait=0.1", http.get(f"/v1/jobs/{job}", params={"wait": 0.1})),
        ("POST /v1/jobs", http.post("/v1/jobs", json={"kind": "sleep", "payload": {}})),
        ("GET /readyz", api.http().get("/readyz")),
    ]
    failed = [
        (what, response.status_code, response.text[:200]) for what, response in answers if response.status_code >= 500
    ]
    assert not failed, failed
    assert answers[0][1].status_code == 303 and answers[2][1].status_code == 200
    assert time.monotonic() - restarted < 10
