"""Who may open the console: admin tokens only, a session cookie, CSRF on every change."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import httpx
import pytest

from service.console.session import CSRF_COOKIE, SESSION_COOKIE
from service.jobs import WorkerInfo
from service.limits import Limit
from service.retry import GiveUp
from service.schedules import ScheduleSpec
from service.tokens import hash_token
from tests.api.conftest import LiveApi
from tests.console.conftest import admin_token
from tests.store.builders import new_job

PAGES = ("/ui", "/ui/jobs", "/ui/failures", "/ui/workers", "/ui/schedules", "/ui/limits", "/ui/stats")


def csrf_of(http: httpx.Client, page: str = "/ui/login") -> str:
    html = http.get(page).text
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def log_in(http: httpx.Client, token: str) -> httpx.Response:
    return http.post("/ui/login", data={"csrf": csrf_of(http), "token": token, "next": "/ui/jobs"})


def test_every_page_asks_for_a_login_first(api: LiveApi) -> None:
    http = api.http()
    for page in PAGES:
        answer = http.get(page)
        assert answer.status_code == 303 and answer.headers["location"].startswith("/ui/login?next="), page
    assert http.get("/ui/jobs/status-of-nothing").status_code == 303


def test_an_admin_token_logs_in_with_a_strict_http_only_cookie_and_a_tenant_token_is_refused(api: LiveApi) -> None:
    http = api.http()
    refused = log_in(http, api.token("acme"))
    assert refused.status_code == 401 and "not a valid admin token" in refused.text
    assert SESSION_COOKIE not in http.cookies
    assert log_in(http, "jobq_" + "x" * 43).status_code == 401

    token = admin_token(api)
    answer = log_in(http, token)
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/jobs"
    cookie = next(h for h in answer.headers.get_list("set-cookie") if h.startswith(SESSION_COOKIE))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert "Secure" not in cookie  # plain HTTP here; over HTTPS the cookie is Secure
    for page in PAGES:
        assert http.get(page).status_code == 200, page
    assert "Log out (alice)" in http.get("/ui").text
    assert "JOBQ_AUTH=off" not in http.get("/ui").text

    [record] = [t for t in api.store.list_tokens() if t.admin]
    api.store.revoke_token(record.id)  # a revoked token ends its sessions at once
    assert http.get("/ui").status_code == 303
    assert api.store.admin_token(hash_token(token)) is None


def test_the_session_cookie_is_secure_over_https(api: LiveApi) -> None:
    token = admin_token(api)
    # uvicorn behind a TLS proxy that says so (--proxy-headers): the request's scheme is https.
    http = api.http()
    http.headers["X-Forwarded-Proto"] = "https"
    http.cookies.set(CSRF_COOKIE, "c" * 43, domain="127.0.0.1", path="/ui")
    answer = http.post("/ui/login", data={"csrf": "c" * 43, "token": token})
    assert answer.status_code == 303
    cookie = next(h for h in answer.headers.get_list("set-cookie") if h.startswith(SESSION_COOKIE))
    assert "Secure" in cookie


def test_a_change_without_the_csrf_token_is_refused_and_changes_nothing(api: LiveApi) -> None:
    job = api.store.enqueue(new_job(tenant="acme"))
    http = api.http()
    assert log_in(http, admin_token(api)).status_code == 303
    csrf = csrf_of(http, f"/ui/jobs/{job.id}")

    for data in ({}, {"csrf": ""}, {"csrf": "x" * 43}):
        answer = http.post(f"/ui/jobs/{job.id}/cancel", data=data)
        assert answer.status_code == 403 and "CSRF" in answer.text, data
    assert api.store.get(job.id).state == "queued"
    without_cookie = api.http(cookies={SESSION_COOKIE: http.cookies[SESSION_COOKIE]})
    assert without_cookie.post(f"/ui/jobs/{job.id}/cancel", data={"csrf": csrf}).status_code == 403

    answer = http.post(f"/ui/jobs/{job.id}/cancel", data={"csrf": csrf})
    assert answer.status_code == 303 and answer.headers["location"] == f"/ui/jobs/{job.id}"
    assert "The job is cancelled." in http.get(answer.headers["location"]).text
    assert api.store.get(job.id).state == "cancelled"
    assert http.post("/ui/login", data={"token": "anything"}).status_code == 403  # the login form too


def test_with_auth_off_the_console_is_open_and_says_so(start_api, store_url: str) -> None:
    api = start_api(store_url, auth=False)
    http = api.http()
    for page in PAGES:
        answer = http.get(page)
        assert answer.status_code == 200 and "JOBQ_AUTH=off" in answer.text, page
    assert http.get("/ui/login").status_code == 303


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/ui", "/v1/jobs"])
def test_a_login_never_redirects_off_the_console(api: LiveApi, target: str) -> None:
    http = api.http()
    answer = http.post("/ui/login", data={"csrf": csrf_of(http), "token": admin_token(api), "next": target})
    assert answer.status_code == 303 and answer.headers["location"] == "/ui"


def test_the_job_page_shows_attempts_payload_result_and_replays_a_failed_job(api: LiveApi, db) -> None:
    store = api.store
    http = api.http()
    assert log_in(http, admin_token(api)).status_code == 303
    store.enqueue(new_job("resize", payload={"image": "cat.png"}, queue="pages", tenant="acme"))
    [ok] = store.claim("worker-a", ["pages"], 1, 30)
    store.complete(ok.lease, {"width": 640})
    page = http.get(f"/ui/jobs/{ok.id}").text
    assert "worker-a" in page and "succeeded" in page and "cat.png" in page
    assert f'href="/ui/jobs/{ok.id}/result"' in page
    assert http.get(f"/ui/jobs/{ok.id}/result").json() == {"job_id": str(ok.id), "result": {"width": 640}}

    store.enqueue(new_job("resize", queue="pages", max_attempts=1))
    [bad] = store.claim("worker-b", ["pages"], 1, 30)
    store.fail(bad.lease, "KeyError: 'width'", GiveUp())
    page = http.get(f"/ui/jobs/{bad.id}").text
    assert "KeyError: &#39;width&#39;" in page and 'id="replay"' in page and 'id="cancel"' not in page
    answer = http.post(f"/ui/jobs/{bad.id}/replay", data={"csrf": csrf_of(http)})
    assert answer.status_code == 303 and answer.headers["location"] == f"/ui/jobs/{bad.id}"
    assert store.get(bad.id).state == "queued"
    record = db.one("SELECT replayed_by FROM job_replays WHERE job_id = %(id)s", id=bad.id)
    assert record["replayed_by"] == "console:alice"
    # Queued again, in a queue no worker serves: the page says why it does not run.
    why = "no live worker serves its queue &#39;pages&#39;"  # the words of `jobq explain`
    assert why in http.get(f"/ui/jobs/{bad.id}").text

    assert http.get("/ui/jobs?id=nope").status_code == 422 and "Not a job id" in http.get("/ui/jobs?id=nope").text
    assert http.get(f"/ui/jobs?id={bad.id}").headers["location"] == f"/ui/jobs/{bad.id}"
    assert http.get("/ui/jobs?state=bogus").status_code == 422
    assert http.get("/ui/jobs/00000000-0000-0000-0000-000000000000").status_code == 404


def test_the_overview_shows_the_limits_and_their_use(api: LiveApi) -> None:
    http = api.http()
    assert log_in(http, admin_token(api)).status_code == 303
    assert "No limits are set" in http.get("/ui").text
    api.store.set_limit(Limit("kind:resize", concurrency=2))
    api.store.enqueue(new_job("resize"))
    api.store.claim("worker-a", ["default"], 1, 30)
    page = http.get("/ui").text
    row = re.search(r'<tr data-scope="kind:resize">(.*?)</tr>', page, re.S)
    assert row, page
    assert re.findall(r'<td class="num">([^<]*)</td>', row.group(1))[:2] == ["1", "2"]  # running, of 2


def test_the_schedules_page_shows_each_schedules_next_run(api: LiveApi) -> None:
    http = api.http()
    assert log_in(http, admin_token(api)).status_code == 303
    assert "No schedules" in http.get("/ui/schedules").text
    api.store.save_schedule(
        ScheduleSpec(name="nightly", cron="30 2 * * *", kind="report", timezone="Europe/Berlin"),
        datetime(2031, 1, 2, 1, 30, tzinfo=UTC),
    )
    api.store.save_schedule(
        ScheduleSpec(name="held", cron="* * * * *", kind="report"), datetime(2031, 1, 1, tzinfo=UTC)
    )
    api.store.set_schedule_paused("held", True)

    page = http.get("/ui/schedules").text
    nightly = re.search(r'<tr data-schedule="nightly">(.*?)</tr>', page, re.S)
    held = re.search(r'<tr data-schedule="held">(.*?)</tr>', page, re.S)
    assert nightly and held, page
    assert "2031-01-02 01:30:00" in nightly.group(1) and "Europe/Berlin" in nightly.group(1)
    assert "paused" in held.group(1) and "2031-01-01" not in held.group(1)


def test_the_job_list_filters_by_state_tenant_and_creation_time(api: LiveApi) -> None:
    http = api.http()
    assert log_in(http, admin_token(api)).status_code == 303
    store = api.store
    old = store.enqueue(new_job("scan", queue="filters", tenant="acme"))
    [running] = store.claim("worker-a", ["filters"], 1, 30)
    assert running.id == old.id
    cut = store.get(old.id).created_at.isoformat()
    time.sleep(0.01)  # ids and created_at carry milliseconds: the later jobs are after the cut
    acme = store.enqueue(new_job("scan", queue="filters", tenant="acme"))
    globex = store.enqueue(new_job("scan", queue="filters", tenant="globex"))

    def listed(**filters: str) -> list[str]:
        page = http.get("/ui/jobs", params={"queue": "filters", **filters})
        assert page.status_code == 200, page.text
        return re.findall(r'<tr class="job-row">\s*<td><a class="mono" href="/ui/jobs/([^"]+)"', page.text)

    assert listed() == [str(globex.id), str(acme.id), str(old.id)]
    assert listed(state="running") == [str(old.id)]
    assert listed(state="queued", tenant="acme") == [str(acme.id)]
    assert listed(tenant="globex") == [str(globex.id)]
    assert listed(created_after=cut) == [str(globex.id), str(acme.id)]
    assert 'value="globex"' in http.get("/ui/jobs", params={"tenant": "globex"}).text  # the form keeps the filter
    assert http.get("/ui/jobs", params={"created_after": "yesterday"}).status_code == 422


def test_the_workers_page_shows_each_worker_and_the_jobs_it_runs_now(api: LiveApi) -> None:
    http = api.http()
    assert log_in(http, admin_token(api)).status_code == 303
    store = api.store
    store.register_worker(WorkerInfo("host-1:4242:a", "host-1", 4242, ("pages",), ("resize",), 3))
    store.register_worker(WorkerInfo("host-2:77:b", "host-2", 77, ("default",), (), 1))
    store.enqueue(new_job("resize", queue="pages", total=10))
    store.enqueue(new_job("resize", queue="pages"))  # stays queued
    [job] = store.claim("host-1:4242:a", ["pages"], 1, 30)
    store.heartbeat(job.lease, 30, done=4)

    page = http.get("/ui/workers").text
    first = re.search(r'<section class="card worker" data-worker="host-1:4242:a">(.*?)</section>', page, re.S)
    second = re.search(r'<section class="card worker" data-worker="host-2:77:b">(.*?)</section>', page, re.S)
    assert first and second, page
    facts = dict(re.findall(r"<dt>([^<]+)</dt><dd[^>]*>(.*?)</dd>", first.group(1)))
    assert {name: facts[name] for name in ("Host", "PID", "Queues", "Kinds", "Concurrency")} == {
        "Host": "host-1",
        "PID": "4242",
        "Queues": "pages",
        "Kinds": "resize",
        "Concurrency": "3",
    }
    assert facts["Started"] and facts["Last seen"] and "alive" in first.group(1)
    assert "Running 1 of 3" in first.group(1) and f'href="/ui/jobs/{job.id}"' in first.group(1)
    assert "4 / 10" in first.group(1)
    assert "Running 0 of 1" in second.group(1) and "any" in second.group(1)  # no kinds given: any kind


def test_the_job_page_shows_a_workflows_parents_and_children_linked_both_ways(api: LiveApi) -> None:
    store = api.store
    http = api.http()
    assert log_in(http, admin_token(api)).status_code == 303
    split, left, right, merge = store.enqueue_many(
        [
            new_job("split", queue="pages"),
            new_job("left", queue="pages", depends_on=(0,)),
            new_job("right", queue="pages", depends_on=(0,)),
            new_job("merge", queue="pages", depends_on=(1, 2)),
        ]
    )
    [running] = store.claim("worker-a", ["pages"], 1, 30)
    store.complete(running.lease, "split")

    top = http.get(f"/ui/jobs/{split.id}").text
    assert 'id="children"' in top and f'href="/ui/jobs/{left.id}"' in top and f'href="/ui/jobs/{right.id}"' in top
    assert "Children: 0 of 2 succeeded" in top
    last = http.get(f"/ui/jobs/{merge.id}").text
    assert "Parents: 0 of 2 done" in last and f'href="/ui/jobs/{left.id}"' in last
    assert "waiting for 2 of 2 parents" in last  # the words of `jobq explain`
    middle = http.get(f"/ui/jobs/{left.id}").text
    assert "Parents: 1 of 1 done" in middle and f'href="/ui/jobs/{split.id}"' in middle
