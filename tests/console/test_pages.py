"""What the console's pages show, over HTTP on both stores: the right error (none for a job that
succeeded in the end), full ids and prefixes, item outcomes, replays in a job's history, a
notice no link can fake, the warning for due jobs nobody serves, one time format, and errors
that are console pages."""

from __future__ import annotations

import re
import time

import httpx

from service.jobs import Completion, ItemOutcome, ItemState, NewJob, WorkerInfo
from service.retry import GiveUp, Retry
from tests.api.conftest import LiveApi
from tests.console.conftest import admin_token
from tests.console.test_access import csrf_of, log_in
from tests.store.builders import claim_one, new_job

TRACEBACK = "\n".join(
    ["Traceback (most recent call last):"]
    + [f'  File "/app/handlers.py", line {n}, in step_{n}\n    step_{n + 1}()' for n in range(30)]
    + ["KeyError: 'width'"]
)


def operator(api: LiveApi) -> httpx.Client:
    http = api.http()
    assert log_in(http, admin_token(api)).status_code == 303
    return http


def test_a_job_that_succeeded_after_failed_attempts_shows_no_error_section(api: LiveApi) -> None:
    http = operator(api)
    store = api.store
    job = store.enqueue(new_job(max_attempts=3))
    store.fail(claim_one(store).lease, "RuntimeError: first try", Retry(0))
    store.complete(claim_one(store).lease, {"ok": True})
    page = http.get(f"/ui/jobs/{job.id}").text
    assert 'id="error"' not in page and "<h2>Error</h2>" not in page
    assert "RuntimeError: first try" in page  # the attempt keeps its error in the history
    assert http.get(f"/ui/jobs/{job.id}").status_code == 200

    failed = store.enqueue(new_job(max_attempts=1))
    store.fail(claim_one(store).lease, "RuntimeError: for good", GiveUp())
    page = http.get(f"/ui/jobs/{failed.id}").text
    assert 'id="error"' in page and "RuntimeError: for good" in page


def test_ids_are_shown_whole_and_a_job_opens_by_any_unique_start_of_its_id(api: LiveApi) -> None:
    http = operator(api)
    first = api.store.enqueue(new_job(queue="ids")).id
    # Ids of one millisecond may differ in their last digit only (the next is the last plus one),
    # and then no start of the second is shorter than the whole id: a later millisecond's differs
    # early (its time part).
    time.sleep(0.002)
    second = api.store.enqueue(new_job(queue="ids")).id
    listed = http.get("/ui/jobs", params={"queue": "ids"}).text
    assert f'<span class="mono id">{first}</span>' in listed and f'<span class="mono id">{second}</span>' in listed

    a, b = str(first), str(second)
    common = next(n for n in range(36) if a[n] != b[n])
    for prefix in (a[: common + 1], a[: common + 1].upper(), a.replace("-", "")[: common + 1]):
        answer = http.get("/ui/jobs", params={"id": prefix})
        assert answer.status_code == 303 and answer.headers["location"] == f"/ui/jobs/{first}", prefix
    assert http.get(f"/ui/jobs/{b[: common + 1]}").headers["location"] == f"/ui/jobs/{second}"

    ambiguous = http.get("/ui/jobs", params={"id": a[:common]})
    assert ambiguous.status_code == 300
    assert "More than one job starts with" in ambiguous.text
    assert f'href="/ui/jobs/{first}"' in ambiguous.text and f'href="/ui/jobs/{second}"' in ambiguous.text

    missing = http.get("/ui/jobs", params={"id": "ffffffff"})
    assert missing.status_code == 404 and "No such job" in missing.text
    bad = http.get("/ui/jobs", params={"id": "xyz!"})
    assert bad.status_code == 422 and "Not a job id" in bad.text and "text/html" in bad.headers["content-type"]


def test_the_job_page_shows_its_items_paged_and_the_failed_ones_with_their_errors(api: LiveApi) -> None:
    http = operator(api)
    store = api.store
    job = store.enqueue(new_job(total=60))
    claimed = claim_one(store)
    outcomes = [
        ItemOutcome(i, ItemState.FAILED, error=TRACEBACK if i == 7 else f"ValueError: row {i}")
        if i % 10 == 7
        else ItemOutcome(i, ItemState.OK)
        for i in range(60)
    ]
    store.heartbeat(claimed.lease, 30, done=60, items=outcomes)
    store.complete(claimed.lease, None)

    page = http.get(f"/ui/jobs/{job.id}").text
    assert "54 ok" in page and "6 failed" in page
    rows = re.findall(r'<tr class="item-row" data-item="(\d+)">', page)
    assert rows == [str(i) for i in range(50)]  # a page of 50
    assert 'id="next-items"' in page
    following = re.search(r'id="next-items" href="([^"]+)"', page)
    assert following
    rest = http.get(following.group(1).replace("&amp;", "&")).text
    assert re.findall(r'<tr class="item-row" data-item="(\d+)">', rest) == [str(i) for i in range(50, 60)]

    failed = http.get(f"/ui/jobs/{job.id}", params={"items": "failed"}).text
    assert re.findall(r'<tr class="item-row" data-item="(\d+)">', failed) == ["7", "17", "27", "37", "47", "57"]
    assert "ValueError: row 17" in failed
    # The long traceback of item 7: its last lines shown, the whole of it folded away.
    assert '<pre class="error-text error-tail">' in failed and "The whole error (62 lines)" in failed
    assert http.get(f"/ui/jobs/{job.id}", params={"items": "bogus"}).status_code == 422


def test_a_replay_shows_in_the_jobs_history_with_who_and_when(api: LiveApi) -> None:
    http = operator(api)
    store = api.store
    job = store.enqueue(new_job(max_attempts=1))
    store.fail(claim_one(store).lease, "RuntimeError: disk full", GiveUp())
    answer = http.post(f"/ui/jobs/{job.id}/replay", data={"csrf": csrf_of(http)})
    assert answer.status_code == 303
    page = http.get(answer.headers["location"]).text
    assert "The job is queued again" in page  # the notice, once
    store.complete(claim_one(store).lease, None)

    page = http.get(f"/ui/jobs/{job.id}").text
    assert "The job is queued again" not in page
    timeline = re.search(r'<ol class="timeline">(.*?)</ol>', page, re.S)
    assert timeline
    entries = re.findall(r"<strong>(Attempt \d|Replayed)</strong>", timeline.group(1))
    assert entries == ["Attempt 1", "Replayed", "Attempt 1"]
    assert '<span class="mono replayed-by">console:alice</span>' in timeline.group(1)
    assert "it was failed after 1 attempt(s)" in timeline.group(1)


def test_the_replayed_notice_comes_from_the_server_never_from_the_url(api: LiveApi) -> None:
    http = operator(api)
    store = api.store
    for _ in range(2):
        store.enqueue(new_job("ocr", max_attempts=1))
        store.fail(claim_one(store).lease, "OSError: disk 3 full", GiveUp())
    assert "Replayed" not in http.get("/ui/failures?replayed=999999").text
    assert "Replayed" not in http.get("/ui/failures?notice=group-replayed").text
    http.cookies.set(
        "jobq_flash", "group-replayed.999999.0123456789abcdef0123456789abcdef", domain="127.0.0.1", path="/ui"
    )
    assert "999999" not in http.get("/ui/failures").text  # a cookie the server did not sign says nothing

    answer = http.post(
        "/ui/failures/replay",
        data={"csrf": csrf_of(http), "kind": "ocr", "group": "OSError: disk N full", "since": "1h"},
    )
    assert answer.status_code == 303 and "replayed" not in answer.headers["location"]
    page = http.get(answer.headers["location"]).text
    assert "Replayed 2 job(s)" in page
    assert "Replayed 2 job(s)" not in http.get(answer.headers["location"]).text  # shown once


def test_the_overview_warns_when_due_jobs_have_no_live_worker(api: LiveApi) -> None:
    http = operator(api)
    api.store.enqueue(new_job(queue="orphaned"))
    api.store.enqueue(new_job(queue="served"))
    api.store.register_worker(WorkerInfo("host-1:1:a", "host-1", 1, ("served",), (), 1))
    page = http.get("/ui").text
    assert re.search(r'data-unserved="orphaned">1 due job\(s\) in queue <strong>orphaned</strong>', page)
    assert 'data-unserved="served"' not in page


def test_times_are_written_one_way_utc_with_the_zone_and_the_other_form_on_hover(api: LiveApi) -> None:
    http = operator(api)
    store = api.store
    job = store.enqueue(new_job(queue="times", delay_seconds=600))
    page = http.get(f"/ui/jobs/{job.id}").text
    tags = re.findall(r'<time datetime="([^"]+)" title="([^"]+)">([^<]+)</time>', page)
    assert tags
    for iso, hover, shown in tags:
        assert iso.endswith("Z")
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", shown) or re.fullmatch(
            r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", hover
        )
    # The reasons of `jobq explain` carry no raw ISO instant.
    reason = re.search(r'<div class="reason">(.*?)</div>', page, re.S)
    assert reason and not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}", reason.group(1))
    assert re.search(r"due at \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", reason.group(1))
    listed = http.get("/ui/jobs", params={"queue": "times"}).text
    assert re.search(
        r'<time datetime="[^"]+Z" title="\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC">just now|\d+ s ago', listed
    )


def test_every_console_error_is_a_console_page(api: LiveApi) -> None:
    http = operator(api)
    for url, status in (
        ("/ui/nowhere", 404),
        ("/ui/jobs?state=bogus", 422),
        ("/ui/jobs?after=bogus", 422),
        ("/ui/jobs?created_after=yesterday", 422),
        ("/ui/jobs/not-a-uuid/status", 422),
        ("/ui/jobs/not-a-uuid/result", 422),
        ("/ui/jobs/00000000-0000-0000-0000-000000000000/result", 404),
        ("/ui/failures?since=forever", 422),
        ("/ui/failures/replay?kind=ocr", 422),
        ("/ui/failures/replay?kind=ocr&group=x&since=forever", 422),
    ):
        answer = http.get(url)
        assert answer.status_code == status, (url, answer.status_code, answer.text[:300])
        assert answer.headers["content-type"].startswith("text/html"), url
        assert "<h1>" in answer.text and "is not a valid" not in answer.text, url
    bogus = http.get("/ui/jobs?state=bogus").text
    assert "no state &#39;bogus&#39;: one of queued" in bogus
    # The API's errors stay problem+json.
    assert http.get("/v1/nowhere").headers["content-type"] == "application/problem+json"


def test_the_overview_lists_failures_workers_and_schedules_have_live_parts(api: LiveApi) -> None:
    http = operator(api)
    for page, part in (
        ("/ui", "overview-live"),
        ("/ui/jobs", "jobs-live"),
        ("/ui/failures", "failures-live"),
        ("/ui/workers", "workers-live"),
        ("/ui/schedules", "schedules-live"),
    ):
        text = http.get(page).text
        assert re.search(rf'id="{part}"[^>]* data-live', text), page
        assert 'id="live-toggle"' in text and 'data-live-seconds="5"' in text
        # The filters' form is outside the live part: a refresh never resets what is being typed.
        live = text[text.index(f'id="{part}"') :]
        assert '<form class="filters"' not in live, page


def test_any_job_of_a_workflow_shows_its_progress_and_links_to_its_jobs_listed_in_keyset_pages(api: LiveApi) -> None:
    http = operator(api)
    store = api.store
    root, *leaves = store.enqueue_many(
        [new_job("split", queue="flow")] + [new_job("chunk", queue="flow", depends_on=(0,)) for _ in range(53)]
    )
    [split] = store.claim("worker-a", ["flow"], 1, 30)
    store.complete_many([Completion(split.lease, "s", children=(NewJob("audit", queue="flow"),))])
    late = store.enqueue(new_job("publish", queue="flow", depends_on=(leaves[-1].id,)))
    [audit] = store.claim("worker-a", ["flow"], 1, 30, kinds=["audit"])
    store.fail(audit.lease, "ValueError: bad audit", GiveUp())
    alone = store.enqueue(new_job("other", queue="flow"))

    expected = "Workflow: 2 of 56 done"  # split succeeded, its audit failed; 53 chunks and publish to go
    for job_id in (root.id, leaves[10].id, late.id):
        page = http.get(f"/ui/jobs/{job_id}").text
        assert expected in page, job_id
        counts = re.search(r'id="workflow-counts">(.*?)</ul>', page, re.S)
        assert counts is not None
        text = re.sub(r"<[^>]+>", "", counts.group(1)).split()
        assert text == ["queued", "54", "(1", "waiting", "for", "parents)", "running", "0",
                        "succeeded", "1", "failed", "1", "cancelled", "0"]  # fmt: skip
    assert 'id="workflow-progress"' not in http.get(f"/ui/jobs/{alone.id}").text

    link = re.search(r'id="workflow-progress">.*?href="([^"]+)"', http.get(f"/ui/jobs/{late.id}").text, re.S)
    assert link is not None and link.group(1) == f"/ui/jobs?workflow={root.id}"
    first = http.get(link.group(1).replace("&amp;", "&"))
    assert "<strong>56</strong> matching job(s)" in first.text
    listed = set(re.findall(r'href="/ui/jobs/([0-9a-f-]{36})"', first.text))
    after = re.search(r'id="next-page" href="([^"]+)"', first.text)
    assert after is not None and len(listed) == 50
    second = http.get(after.group(1).replace("&amp;", "&")).text
    listed |= set(re.findall(r'href="/ui/jobs/([0-9a-f-]{36})"', second))
    assert len(listed) == 56 and str(alone.id) not in listed and str(root.id) in listed
    assert http.get("/ui/jobs", params={"workflow": "nope"}).status_code == 422
