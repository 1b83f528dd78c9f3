"""Acting from the console over HTTP on both stores: bulk cancel and replay of a filtered set
(a dry run first), a queue's pause, a schedule's run now, pause and resume; each needs the CSRF
token, is refused to a read-only operator, and is recorded in the audit trail."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime

import httpx
import pytest

from service.limits import Limit
from service.retry import GiveUp
from service.schedules import ScheduleSpec
from service.tokens import hash_token, new_token
from tests.api.conftest import LiveApi
from tests.console.conftest import admin_token
from tests.console.test_access import csrf_of, log_in
from tests.store.builders import claim_one, new_job


def operator(api: LiveApi, name: str = "alice") -> httpx.Client:
    http = api.http()
    assert log_in(http, admin_token(api, name)).status_code == 303
    return http


def read_only_operator(api: LiveApi) -> httpx.Client:
    token = new_token()
    api.store.create_token("", hash_token(token), "viewer", admin=True, read_only=True)
    http = api.http()
    assert log_in(http, token).status_code == 303
    return http


def test_a_bulk_cancel_shows_its_count_first_then_cancels_only_the_filtered_set(api: LiveApi, db) -> None:
    http = operator(api)
    store = api.store
    doomed = [store.enqueue(new_job("scan", queue="bulk")).id for _ in range(3)]
    store.enqueue(new_job("other", queue="bulk"))
    store.enqueue(new_job("scan", queue="elsewhere"))
    page = http.get("/ui/jobs", params={"kind": "scan", "queue": "bulk"}).text
    link = re.search(r'id="bulk-cancel" href="([^"]+)"', page)
    assert link
    dry = http.get(link.group(1).replace("&amp;", "&"))
    assert dry.status_code == 200 and '<strong id="bulk-count">3</strong>' in dry.text
    assert {s.state for s in map(store.get, doomed)} == {"queued"}  # the dry run changed nothing

    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', dry.text))
    answer = http.post("/ui/bulk", data=fields)
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/jobs?kind=scan&queue=bulk"
    assert "Cancelled 3 job(s)" in http.get(answer.headers["location"]).text
    assert {store.get(i).state for i in doomed} == {"cancelled"}
    assert db.count("jobs", "state = 'queued'") == 2  # the other kind, the other queue

    [entry] = store.list_actions(10)
    assert (entry.actor, entry.action, entry.jobs) == ("alice", "bulk-cancel", 3)
    assert json.loads(entry.detail) == {"filter": {"kind": "scan", "queue": "bulk"}}


def test_a_bulk_replay_queues_the_failed_jobs_of_a_filter_again(api: LiveApi) -> None:
    http = operator(api)
    store = api.store
    failed = []
    for _ in range(2):
        job = store.enqueue(new_job("ocr", max_attempts=1))
        store.fail(claim_one(store).lease, "OSError: disk full", GiveUp())
        failed.append(job.id)
    store.enqueue(new_job("ocr"))  # queued: not replayable
    dry = http.get("/ui/bulk", params={"action": "replay", "kind": "ocr"}).text
    assert '<strong id="bulk-count">2</strong>' in dry
    answer = http.post("/ui/bulk", data={"csrf": csrf_of(http, "/ui"), "action": "replay", "kind": "ocr"})
    assert "Replayed 2 job(s)" in http.get(answer.headers["location"]).text
    assert {store.get(i).state for i in failed} == {"queued"}
    assert [r.replayed_by for i in failed for r in store.job_replays(i)] == ["console:alice"] * 2
    assert http.get("/ui/bulk", params={"action": "explode"}).status_code == 422


def test_pausing_a_queue_stops_its_claims_and_resuming_restores_its_limit(api: LiveApi) -> None:
    http = operator(api)
    store = api.store
    store.set_limit(Limit("queue:pausable", concurrency=3, rate=10, per_seconds=60.0))
    store.enqueue(new_job(queue="pausable"))
    store.enqueue(new_job(queue="pausable"))
    assert 'action="/ui/scopes/pause"' in http.get("/ui").text
    csrf = csrf_of(http, "/ui")
    answer = http.post("/ui/scopes/pause", data={"csrf": csrf, "scope": "queue:pausable"})
    assert answer.status_code == 303
    assert "Paused" in http.get("/ui").text
    assert store.claim("worker-a", ["pausable"], 2, 30) == []  # no claim while paused
    [limit] = [x for x in store.list_limits() if x.scope == "queue:pausable"]
    assert (limit.concurrency, limit.rate) == (0, 10)  # its rate kept

    http.post("/ui/scopes/resume", data={"csrf": csrf, "scope": "queue:pausable"})
    [limit] = [x for x in store.list_limits() if x.scope == "queue:pausable"]
    assert (limit.concurrency, limit.rate) == (3, 10)
    assert len(store.claim("worker-a", ["pausable"], 2, 30)) == 2

    http.post("/ui/scopes/pause", data={"csrf": csrf, "scope": "kind:unlimited"})
    http.post("/ui/scopes/resume", data={"csrf": csrf, "scope": "kind:unlimited"})
    assert [x for x in store.list_limits() if x.scope == "kind:unlimited"] == []  # no limit before, none after
    assert http.post("/ui/scopes/pause", data={"csrf": csrf, "scope": "tenant:acme"}).status_code == 422
    actions = [(a.action, a.target) for a in store.list_actions(10)]
    assert actions[-2:] == [("scope-resume", "queue:pausable"), ("scope-pause", "queue:pausable")]


def test_a_schedule_runs_now_pauses_and_resumes_from_the_console(api: LiveApi) -> None:
    http = operator(api)
    store = api.store
    store.save_schedule(
        ScheduleSpec(name="nightly", cron="30 2 * * *", kind="report"), datetime(2031, 1, 2, tzinfo=UTC)
    )
    csrf = csrf_of(http, "/ui/schedules")
    answer = http.post("/ui/schedules/nightly/run-now", data={"csrf": csrf})
    assert answer.status_code == 303
    job_id = answer.headers["location"].rsplit("/", 1)[1]
    page = http.get(answer.headers["location"]).text
    assert "The schedule&#39;s job is queued now." in page and "report" in page
    assert store.get(uuid.UUID(job_id)).state == "queued"

    http.post("/ui/schedules/nightly/pause", data={"csrf": csrf})
    assert [s.paused for s in store.list_schedules()] == [True]
    http.post("/ui/schedules/nightly/resume", data={"csrf": csrf})
    assert [s.paused for s in store.list_schedules()] == [False]
    assert http.post("/ui/schedules/nowhere/run-now", data={"csrf": csrf}).status_code == 404
    assert [a.action for a in store.list_actions(10)] == ["schedule-resume", "schedule-pause", "schedule-run-now"]


def test_every_change_is_in_the_audit_trail_and_a_jobs_page_shows_its_own(api: LiveApi) -> None:
    http = operator(api)
    store = api.store
    job = store.enqueue(new_job())
    http.post(f"/ui/jobs/{job.id}/cancel", data={"csrf": csrf_of(http, "/ui")})
    http.post(f"/ui/jobs/{job.id}/replay", data={"csrf": csrf_of(http, "/ui")})
    audit = http.get("/ui/audit").text
    rows = re.findall(r'<tr class="audit-row" data-action="([^"]+)">', audit)
    assert rows == ["replay", "cancel"] and "alice" in audit
    page = http.get(f"/ui/jobs/{job.id}").text
    assert re.findall(r'<li data-action="([^"]+)">', page) == ["replay", "cancel"]
    assert http.get("/ui/audit?before=x").status_code == 422


def test_a_jobs_failed_items_are_replayed_alone(api: LiveApi) -> None:
    from service.jobs import ItemOutcome, ItemQuery, ItemState

    http = operator(api)
    store = api.store
    job = store.enqueue(new_job(total=3))
    claimed = claim_one(store)
    items = [
        ItemOutcome(0, ItemState.OK),
        ItemOutcome(1, ItemState.FAILED, error="ValueError: bad"),
        ItemOutcome(2, ItemState.OK),
    ]
    store.heartbeat(claimed.lease, 30, done=3, items=items)
    store.complete(claimed.lease, None)
    page = http.get(f"/ui/jobs/{job.id}").text
    assert "Replay 1 failed item(s)" in page
    answer = http.post(f"/ui/jobs/{job.id}/replay-items", data={"csrf": csrf_of(http, "/ui")})
    assert "failed items only" in http.get(answer.headers["location"]).text
    assert store.get(job.id).state == "queued"
    assert [i.index for i in store.list_items(ItemQuery(job_id=job.id)).items] == [0, 2]  # the ok ones kept
    assert [a.action for a in store.list_actions(5)] == ["replay-failed-items"]


def test_a_delayed_job_runs_now(api: LiveApi) -> None:
    http = operator(api)
    store = api.store
    job = store.enqueue(new_job(queue="later", delay_seconds=3600))
    assert store.claim("worker-a", ["later"], 1, 30) == []
    page = http.get(f"/ui/jobs/{job.id}").text
    assert 'id="run-now"' in page
    csrf = csrf_of(http, "/ui")
    answer = http.post(f"/ui/jobs/{job.id}/run-now", data={"csrf": csrf})
    assert "The job is due now" in http.get(answer.headers["location"]).text
    [claimed] = store.claim("worker-a", ["later"], 1, 30)
    assert claimed.id == job.id
    again = http.post(f"/ui/jobs/{job.id}/run-now", data={"csrf": csrf})  # running now: nothing to do
    assert "Nothing to run now" in http.get(again.headers["location"]).text
    assert [a.action for a in store.list_actions(5)] == ["run-now"]


ACTIONS = [
    ("/ui/jobs/{job}/cancel", {}),
    ("/ui/jobs/{job}/run-now", {}),
    ("/ui/jobs/{job}/replay-items", {}),
    ("/ui/jobs/{job}/replay", {}),
    ("/ui/failures/replay", {"kind": "resize", "group": "x", "since": "1h"}),
    ("/ui/bulk", {"action": "cancel"}),
    ("/ui/bulk", {"action": "replay"}),
    ("/ui/schedules/nightly/run-now", {}),
    ("/ui/schedules/nightly/pause", {}),
    ("/ui/scopes/pause", {"scope": "queue:default"}),
    ("/ui/scopes/resume", {"scope": "queue:default"}),
    ("/ui/limits", {"scope": "queue:default", "concurrency": "2"}),
    ("/ui/limits/delete", {"scope": "queue:default"}),
]


def test_a_read_only_operator_sees_every_page_and_is_refused_every_action(api: LiveApi, db) -> None:
    store = api.store
    job = store.enqueue(new_job())
    store.save_schedule(
        ScheduleSpec(name="nightly", cron="30 2 * * *", kind="report"), datetime(2031, 1, 2, tzinfo=UTC)
    )
    http = read_only_operator(api)
    pages = ("/ui", "/ui/jobs", f"/ui/jobs/{job.id}", "/ui/failures", "/ui/workers", "/ui/schedules", "/ui/audit")
    for page in (*pages, "/ui/limits", "/ui/stats"):
        text = http.get(page).text
        assert "read-only" in text, page
        assert 'method="post" action="/ui/jobs' not in text and "run-now" not in text and "/ui/scopes/" not in text
        assert 'id="bulk-cancel"' not in text and 'action="/ui/limits' not in text
    csrf = csrf_of(http, "/ui")
    for url, fields in ACTIONS:
        answer = http.post(url.format(job=job.id), data={"csrf": csrf, **fields})
        assert answer.status_code == 403 and "Read-only" in answer.text, url
    assert store.get(job.id).state == "queued" and store.list_limits() == []
    assert [s.paused for s in store.list_schedules()] == [False]
    assert db.count("jobs") == 1 and store.list_actions(10) == []


@pytest.mark.parametrize(("url", "fields"), ACTIONS)
def test_every_action_needs_the_csrf_token(api: LiveApi, url: str, fields: dict[str, str]) -> None:
    job = api.store.enqueue(new_job())
    http = operator(api)
    answer = http.post(url.format(job=job.id), data=fields)
    assert answer.status_code == 403 and "CSRF" in answer.text
    assert api.store.get(job.id).state == "queued" and api.store.list_actions(10) == []


def test_limits_are_set_edited_and_deleted_from_the_console_and_each_change_is_audited(api: LiveApi) -> None:
    http = operator(api)
    store = api.store
    csrf = csrf_of(http, "/ui/limits")
    answer = http.post("/ui/limits", data={"csrf": csrf, "scope": "tenant:acme", "concurrency": "3", "rate": "5/s"})
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/limits"
    assert "The limit is set" in http.get("/ui/limits").text
    assert store.list_limits() == [Limit("tenant:acme", concurrency=3, rate=5, per_seconds=1.0)]

    form = http.get("/ui/limits", params={"scope": "tenant:acme"}).text  # the edit form, filled in
    assert 'name="concurrency" value="3"' in form and 'name="rate" value="5/s"' in form
    http.post("/ui/limits", data={"csrf": csrf, "scope": "tenant:acme", "concurrency": "", "weight": "2.5"})
    assert store.list_limits() == [Limit("tenant:acme", weight=2.5)]

    deleted = http.post("/ui/limits/delete", data={"csrf": csrf, "scope": "tenant:acme"})
    assert "The limit is removed" in http.get(deleted.headers["location"]).text
    assert store.list_limits() == []
    entries = [(e.action, e.target, json.loads(e.detail)) for e in reversed(store.list_actions(10))]
    assert entries == [
        ("limit-set", "tenant:acme", {"concurrency": 3, "rate": "5/s", "weight": None, "previous": None}),
        (
            "limit-set",
            "tenant:acme",
            {
                "concurrency": None,
                "rate": None,
                "weight": 2.5,
                "previous": {"concurrency": 3, "rate": "5/s", "weight": None},
            },
        ),
        ("limit-delete", "tenant:acme", {"previous": {"concurrency": None, "rate": None, "weight": 2.5}}),
    ]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"scope": "tenant:acme", "concurrency": "-1"}, "concurrency must be a whole number"),
        ({"scope": "tenant:acme", "concurrency": "2.5"}, "concurrency must be a whole number"),
        ({"scope": "tenant:acme", "rate": "fast"}, "a rate is N/PERIOD"),
        ({"scope": "tenant:acme", "weight": "heavy"}, "weight must be a number"),
        ({"scope": "tenant:acme", "weight": "nan"}, "weight must be a number"),
        ({"scope": "queue:gpu", "weight": "2"}, "only tenant scopes take one"),
        ({"scope": "galaxy:far", "concurrency": "1"}, "a scope is tenant:NAME"),
        ({"scope": "tenant:acme"}, "a limit needs a concurrency, a rate or a weight"),
    ],
)
def test_a_bad_limit_is_a_console_page_that_says_why_and_changes_nothing(
    api: LiveApi, fields: dict[str, str], words: str
) -> None:
    api.store.set_limit(Limit("tenant:acme", concurrency=7))
    http = operator(api)
    answer = http.post("/ui/limits", data={"csrf": csrf_of(http, "/ui/limits"), **fields})
    assert answer.status_code == 422 and answer.headers["content-type"].startswith("text/html")
    assert words in answer.text and "Nothing was changed" in answer.text
    assert api.store.list_limits() == [Limit("tenant:acme", concurrency=7)] and api.store.list_actions(5) == []
    missing = http.post("/ui/limits/delete", data={"csrf": csrf_of(http, "/ui/limits"), "scope": "kind:none"})
    assert missing.status_code == 404 and "no limit is set on kind:none" in missing.text


def test_a_read_only_operator_cannot_change_or_remove_a_limit(api: LiveApi) -> None:
    api.store.set_limit(Limit("kind:ocr", concurrency=2))
    http = read_only_operator(api)
    csrf = csrf_of(http, "/ui/limits")
    for url, fields in (("/ui/limits", {"concurrency": "9"}), ("/ui/limits/delete", {})):
        answer = http.post(url, data={"csrf": csrf, "scope": "kind:ocr", **fields})
        assert answer.status_code == 403 and "Read-only" in answer.text, url
    assert api.store.list_limits() == [Limit("kind:ocr", concurrency=2)] and api.store.list_actions(5) == []
