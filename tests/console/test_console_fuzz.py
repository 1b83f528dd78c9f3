"""The console's query strings and forms, fuzzed (issue 26): whatever an operator's browser, or
someone else's, sends to a console URL, the answer is a page or a redirect, never a 5xx.

Hypothesis draws a console route (every GET page and every POST form but logout, which would end
the session the run needs) and values for its parameters, known and unknown: free text (NUL and
all), numbers too large for SQLite's integers, digits ``str.isdigit`` takes and ``int`` does not,
dates at the ends of the calendar, durations past ``timedelta``, ids, states and scopes. Each
request goes to the app's ASGI callable (httpx's ASGITransport, no server) with an operator's
session cookie and, for a form, its CSRF token. Bounded: a fixed number of examples per store.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.app import create_app
from service.config import Settings
from service.jobs import ItemOutcome, ItemState
from service.limits import Limit
from service.retry import GiveUp
from service.schedules import ScheduleSpec
from service.store import Store
from tests.api.asgi import AsgiHttp, log_in_operator
from tests.conftest import build_store
from tests.store.builders import claim_one, new_job

JOB = "{job}"  # a route's job id: the seeded job's, or a drawn text

GETS: dict[str, tuple[str, ...]] = {
    "/ui": (),
    "/ui/jobs": ("id", "state", "kind", "queue", "tenant", "created_after", "after"),
    f"/ui/jobs/{JOB}": ("items", "items_after"),
    f"/ui/jobs/{JOB}/status": ("wait", "tag"),
    f"/ui/jobs/{JOB}/result": (),
    "/ui/failures": ("since", "kind"),
    "/ui/failures/replay": ("kind", "group", "since"),
    "/ui/workers": (),
    "/ui/schedules": (),
    "/ui/bulk": ("action", "state", "kind", "queue", "tenant", "created_after"),
    "/ui/audit": ("before", "target"),
    "/ui/login": ("next",),
}
POSTS: dict[str, tuple[str, ...]] = {
    f"/ui/jobs/{JOB}/cancel": (),
    f"/ui/jobs/{JOB}/replay": (),
    f"/ui/jobs/{JOB}/run-now": (),
    f"/ui/jobs/{JOB}/replay-items": (),
    "/ui/failures/replay": ("kind", "group", "since"),
    "/ui/bulk": ("action", "state", "kind", "queue", "tenant", "created_after"),
    "/ui/schedules/{name}/{what}": (),
    "/ui/scopes/{what}": ("scope",),
    "/ui/login": ("token", "next"),
}
ROUTES = [("GET", path, names) for path, names in GETS.items()] + [
    ("POST", path, names) for path, names in POSTS.items()
]

SPECIAL = [
    "",
    " ",
    "0",
    "-1",
    "1",
    "31",
    "9" * 25,  # past SQLite's 64-bit integers
    "\u00b2",  # a digit to str.isdigit, not to int()
    "\u0663",  # ARABIC-INDIC DIGIT THREE: both take it
    "1e309",
    "nan",
    "inf",
    "-inf",
    "24h",
    "1e400h",
    "99999999999999d",
    "-5m",
    "0001-01-01T00:00:00-23:59",
    "9999-12-31T23:59:59+23:59",
    "9999-12-31T23:59:59-23:59",
    "2026-02-30",
    "2026-12-04T12:00:00",
    "00000000-0000-0000-0000-000000000000",
    "ffffffff-ffff-ffff-ffff-ffffffffffff",
    "queued",
    "failed",
    "running",
    "cancel",
    "replay",
    "pause",
    "resume",
    "run-now",
    "queue:default",
    "kind:resize",
    "tenant:acme",
    "key:",
    "queue:",
    "nightly",
    "resize",
    "ValueError",
    "/ui/jobs",
    "//evil.example",
    "x" * 5_000,
    "a\x00b",
    "%00",
    "\u202e",
    "\U0001f600",
]
values = st.one_of(
    st.sampled_from(SPECIAL),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12),  # a lone surrogate cannot be sent
    st.integers(-(2**70), 2**70).map(str),
)


@dataclass
class Console:
    http: AsgiHttp
    store: Store
    job: str
    csrf: str


@pytest.fixture
def console(store_url: str) -> Iterator[Console]:
    store = build_store(store_url)
    seeded = store.enqueue(new_job(total=3, max_attempts=1))
    claimed = claim_one(store)
    store.heartbeat(claimed.lease, 30.0, items=[ItemOutcome(0, ItemState.FAILED, error="ValueError: row 0")])
    store.fail(claimed.lease, "ValueError: bad row", GiveUp())
    store.enqueue(new_job(queue="other", delay_seconds=3_600))
    store.save_schedule(ScheduleSpec(name="nightly", cron="0 3 * * *", kind="resize"), store.database_now())
    store.set_limit(Limit("queue:default", concurrency=2))
    # raise_app_exceptions=False: an exception nothing handled comes back as the 500 a browser sees.
    with AsgiHttp(create_app(Settings(database_url=store_url)), raise_app_exceptions=False) as http:
        log_in_operator(http, store)
        page = http.get("/ui/jobs")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert page.status_code == 200 and csrf, page.text[:500]
        yield Console(http, store, str(seeded.id), csrf.group(1))
    store.close()


def _a_path_segment(value: str) -> bool:
    """Text a URL's path can carry as one segment (httpx refuses control characters in a URL)."""
    return bool(value) and not any(char in "/?#%" or char < " " or char == "\x7f" for char in value)


def _target(console: Console, path: str, path_values: dict[str, str]) -> str:
    filled = path.replace("{name}", path_values.get("name", "nightly")).replace(
        "{what}", path_values.get("what", "pause")
    )
    return filled.replace(JOB, path_values.get("job", console.job))


# What the fuzz found (each answered 500 before): a digit str.isdigit takes and int() does not;
# numbers past SQLite's integers; an instant past the calendar's end in UTC (SQLite); the result
# of a job that did not succeed (InvalidTransition, which the console's error page did not know).
FOUND = [
    ("/ui/jobs/{job}", {"items_after": "\u00b2"}),
    ("/ui/jobs/{job}", {"items_after": "9" * 20}),
    ("/ui/audit", {"before": "\u00b2"}),
    ("/ui/audit", {"before": "9" * 20}),
    ("/ui/jobs", {"created_after": "9999-12-31T23:59:59-23:59"}),
    ("/ui/jobs/{job}/result", {}),
]


@pytest.mark.parametrize(("path", "query"), FOUND, ids=[f"{path}?{query}" for path, query in FOUND])
def test_what_the_fuzz_found_is_a_page_not_a_5xx(console: Console, path: str, query: dict[str, str]) -> None:
    answer = console.http.get(_target(console, path, {}), params=query)
    assert answer.status_code < 500, (answer.status_code, answer.text[:300])  # PostgreSQL takes year 10000
    assert "text/html" in answer.headers["content-type"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(ROUTES), data=st.data())
def test_no_console_url_answers_a_5xx_whatever_its_query_or_form(
    console: Console, route: tuple[str, str, tuple[str, ...]], data: st.DataObject
) -> None:
    method, path, names = route
    known = data.draw(st.dictionaries(st.sampled_from(names), values, max_size=len(names))) if names else {}
    unknown = data.draw(st.dictionaries(st.sampled_from(["x", "page", "id[]", ""]), values, max_size=1))
    fields = {**unknown, **known}
    segment = values.filter(_a_path_segment)
    path_values = data.draw(st.fixed_dictionaries({}, optional=dict.fromkeys(("job", "name", "what"), segment)))
    target = _target(console, path, path_values)
    if method == "GET":
        answer = console.http.get(target, params=fields)
    else:
        answer = console.http.post(target, data={"csrf": console.csrf, **fields})
    assert answer.status_code < 500, (method, target, fields, answer.status_code, answer.text[:300])
