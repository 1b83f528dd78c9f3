"""Console sessions over HTTP on both stores: a random id in the cookie and only its hash in the
table, ended by logout (a copied cookie too), by revoking the token and by the idle timeout;
logins limited per client; the security headers on every console response."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from service.console.session import IDLE_SECONDS, LOGIN_ATTEMPTS, SESSION_COOKIE
from tests.api.conftest import LiveApi
from tests.conftest import Database, FakeClock
from tests.console.conftest import admin_token
from tests.console.test_access import PAGES, csrf_of, log_in

SCRIPT = {"Accept": "application/json", "X-Jobq-Page": "/ui/jobs?state=failed"}


def test_the_cookie_holds_a_random_session_id_and_the_table_only_its_hash(api: LiveApi, db: Database) -> None:
    token = admin_token(api)
    http = api.http()
    assert log_in(http, token).status_code == 303
    session_id = http.cookies[SESSION_COOKIE]
    assert token not in session_id and len(session_id) == 43
    [row] = db.rows("SELECT id_hash FROM console_sessions")
    assert row["id_hash"] == hashlib.sha256(session_id.encode()).hexdigest()
    second = api.http()
    assert log_in(second, token).status_code == 303
    assert second.cookies[SESSION_COOKIE] != session_id  # every login its own session
    assert db.count("console_sessions") == 2


def test_logout_ends_a_copied_session(api: LiveApi) -> None:
    http = api.http()
    assert log_in(http, admin_token(api)).status_code == 303
    copy = api.http(cookies={SESSION_COOKIE: http.cookies[SESSION_COOKIE]})
    assert copy.get("/ui").status_code == 200

    answer = http.post("/ui/logout", data={"csrf": csrf_of(http, "/ui")})
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/login"

    for page in PAGES:
        assert copy.get(page).status_code == 303, page
    # A page's script learns that its session ended, and where to log in again.
    lost = copy.get("/ui/jobs/00000000-0000-0000-0000-000000000000/status", headers=SCRIPT)
    assert lost.status_code == 401
    assert lost.json() == {"login": "/ui/login?next=%2Fui%2Fjobs%3Fstate%3Dfailed"}
    refresh = copy.get("/ui/jobs?state=failed", headers={"X-Jobq-Page": "/ui/jobs?state=failed"})  # a live page
    assert refresh.status_code == 401 and refresh.json()["login"].startswith("/ui/login?next=")


def test_revoking_the_token_ends_its_sessions(api: LiveApi) -> None:
    token = admin_token(api, "bob")
    http = api.http()
    assert log_in(http, token).status_code == 303
    assert http.get("/ui").status_code == 200
    [record] = [t for t in api.store.list_tokens() if t.name == "bob"]
    api.store.revoke_token(record.id)
    assert http.get("/ui").status_code == 303
    assert log_in(http, token).status_code == 401


def test_a_session_unused_for_the_idle_timeout_ends(start_api, store_url: str, clock: FakeClock) -> None:
    api = start_api(store_url, clock=clock)
    http = api.http()
    assert log_in(http, admin_token(api)).status_code == 303
    for _ in range(3):  # in use: each request starts the idle time again
        clock.advance(IDLE_SECONDS * 0.6)
        assert http.get("/ui").status_code == 200
    clock.advance(IDLE_SECONDS + 1)
    assert http.get("/ui").status_code == 303


@pytest.mark.parametrize("path", [*PAGES, "/ui/login", "/ui/static/console.css", "/ui/nowhere", "/ui/jobs?id=zz"])
def test_every_console_response_carries_the_security_headers(api: LiveApi, path: str) -> None:
    http = api.http()
    if path != "/ui/login":
        assert log_in(http, admin_token(api)).status_code == 303
    answer = http.get(path)
    assert answer.status_code < 500
    csp = answer.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["referrer-policy"] == "same-origin"
    assert answer.headers["cache-control"] == "no-store"
    assert answer.headers["x-frame-options"] == "DENY"


def test_the_api_keeps_its_own_headers(api: LiveApi) -> None:
    answer = api.http(api.token()).get("/v1/jobs")
    assert "content-security-policy" not in answer.headers


def test_login_attempts_are_limited_per_client(api: LiveApi) -> None:
    token = admin_token(api)

    def client(address: str) -> httpx.Client:
        http = api.http()
        http.headers["X-Forwarded-For"] = address  # uvicorn trusts it from 127.0.0.1, as from a proxy
        return http

    guesser = client("10.0.0.7")
    for _ in range(LOGIN_ATTEMPTS):
        assert log_in(guesser, "jobq_" + "x" * 43).status_code == 401
    refused = log_in(guesser, token)  # even the right token: the client must wait
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert "Too many login attempts" in refused.text and SESSION_COOKIE not in guesser.cookies
    assert log_in(client("10.0.0.8"), token).status_code == 303  # another client is not held up
