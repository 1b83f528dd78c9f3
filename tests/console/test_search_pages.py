"""The console's search and stats over HTTP on both stores: the count (capped), previous and
next pages that keep every filter, a bulk action that takes the whole search, the stats page's
charts for each range, and bad input as a console page."""

from __future__ import annotations

import html
import re
import time

from service.console import routes
from service.retry import GiveUp
from tests.api.conftest import LiveApi
from tests.console.test_pages import operator
from tests.store.builders import claim_one, new_job


def _ids(page: str) -> list[str]:
    return re.findall(r'<tr class="job-row">\s*<td><a class="mono" href="/ui/jobs/([0-9a-f-]{36})"', page)


def _link(page: str, element_id: str) -> str | None:
    found = re.search(rf'id="{element_id}" href="([^"]+)"', page)
    return html.unescape(found.group(1)) if found else None


def test_pages_back_and_forth_keep_every_filter_and_the_count_is_capped(api: LiveApi, monkeypatch) -> None:
    monkeypatch.setattr(routes, "PAGE_SIZE", 3)
    monkeypatch.setattr(routes, "JOB_SEARCH_CAP", 5)
    store = api.store
    made = []
    for n in range(7):
        made.append(str(store.enqueue(new_job("paged", concurrency_key="k-1", idempotency_key=f"i-{n}")).id))
        time.sleep(0.002)
    store.enqueue(new_job("paged"))  # no concurrency key: never in the search
    made.reverse()
    http = operator(api)
    first = http.get("/ui/jobs", params={"kind": "paged", "concurrency_key": "k-1", "state": "queued"}).text
    # The count reads at most 5 jobs (the cap, patched) of the key's index, and one more to know
    # that it stopped early: "at least 6".
    assert _ids(first) == made[:3] and "<strong>6+</strong> matching" in first and _link(first, "prev-page") is None
    assert "counted in the newest 5" in first

    second = http.get(_link(first, "next-page")).text
    third = http.get(_link(second, "next-page")).text
    assert _ids(second) == made[3:6] and _ids(third) == made[6:] and _link(third, "next-page") is None
    for url in (_link(second, "next-page"), _link(third, "prev-page")):
        assert "kind=paged" in url and "concurrency_key=k-1" in url and "state=queued" in url
    back = http.get(_link(third, "prev-page")).text
    assert _ids(back) == made[3:6]
    front = http.get(_link(back, "prev-page")).text
    assert _ids(front) == made[:3] and _link(front, "prev-page") is None

    one = http.get("/ui/jobs", params={"idempotency_key": "i-4"}).text
    assert _ids(one) == [made[2]] and "<strong>1</strong> matching" in one
    dry = http.get(_link(one, "bulk-cancel")).text  # the bulk action takes the whole search
    assert '<strong id="bulk-count">1</strong>' in dry and 'name="idempotency_key" value="i-4"' in dry


def test_a_search_by_error_text_and_time_range_and_bad_input_as_a_page(api: LiveApi) -> None:
    store = api.store
    failed = store.enqueue(new_job("ocr", max_attempts=1)).id
    store.fail(claim_one(store).lease, "OSError: disk <sda> full", GiveUp())
    http = operator(api)
    page = http.get("/ui/jobs", params={"error": "<SDA>", "created_after": "2000-01-01T00:00Z"}).text
    assert _ids(page) == [str(failed)]
    assert _ids(http.get("/ui/jobs", params={"error": "disk", "created_before": "2000-01-01"}).text) == []
    for params, words in (
        ({"created_before": "yesterday"}, "before:"),
        ({"created_after": "2030-01-02", "created_before": "2030-01-01"}, "must be earlier"),
        ({"error": "x" * 300}, "at most 255 characters"),
        ({"after": "nope"}, "not a page of this list"),
    ):
        answer = http.get("/ui/jobs", params=params)
        assert answer.status_code == 422 and words in answer.text, params
        assert answer.headers["content-type"].startswith("text/html")


def test_the_stats_page_draws_four_charts_per_queue_or_kind_for_each_range(api: LiveApi) -> None:
    store = api.store
    for ok in (True, False):
        store.enqueue(new_job("ocr", queue="gpu", max_attempts=1))
        job = claim_one(store, queues=("gpu",))
        store.complete(job.lease, None) if ok else store.fail(job.lease, "ValueError: bad", GiveUp())
    http = operator(api)
    for span in ("1h", "24h"):
        for by, name in (("queue", "gpu"), ("kind", "ocr")):
            page = http.get("/ui/stats", params={"range": span, "by": by}).text
            row = re.search(rf'<tr class="stats-row" data-name="{name}">(.*?)</tr>', page, re.S)
            assert row, (span, by)
            charts = re.findall(r'<svg class="chart" data-chart="([\w-]+)"', row.group(1))
            assert charts == ["throughput", "failure-ratio", "wait", "run"]
            assert '<td class="num" data-col="failure-ratio">50.0 %</td>' in row.group(1)
            assert page.count("<script") == 1 and "style=" not in page  # CSP: console.js only, nothing inline
    week = http.get("/ui/stats", params={"range": "7d"})
    assert week.status_code == 200 and "daily rollup" in week.text
    bad = http.get("/ui/stats", params={"range": "1y"})
    assert bad.status_code == 422 and "range is one of 1h, 24h, 7d" in bad.text
