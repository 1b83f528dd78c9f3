"""The console's overview shows what holds back vacuum on PostgreSQL: the oldest open transaction on
the database, its age and who holds it; on SQLite, which measures none of it, nothing."""

from __future__ import annotations

import re
import time

import httpx
import psycopg
from markupsafe import escape

from tests.api.conftest import LiveApi
from tests.console.test_pages import operator

APP = "bi-tool <report>"  # a client names itself: the page escapes it


def oldest_transaction(page: str) -> str | None:
    found = re.search(r'<p class="database" id="oldest-transaction">(.*?)</p>', page, flags=re.DOTALL)
    return " ".join(found.group(1).split()) if found else None


def test_the_overview_shows_the_oldest_transaction_and_who_holds_it(api: LiveApi, store_url: str) -> None:
    http = operator(api)
    if not store_url.startswith("postgresql"):
        assert oldest_transaction(http.get("/ui").text) is None
        return
    assert oldest_transaction(http.get("/ui").text) == "Oldest open transaction on the database: none."

    with psycopg.connect(store_url, application_name=APP) as idle:  # not autocommit: the SELECT opens one
        idle.execute("SELECT 1")
        pid = idle.info.backend_pid
        first = shown_once_older_than(api, http, 1.0)
        later = shown_once_older_than(api, http, 3.0)

    for shown in (first, later):
        assert re.fullmatch(
            r'Oldest open transaction on the database: <span data-figure="oldest-transaction-age">\d+ s</span>, '
            rf'pid <span class="mono">{pid}</span>, <strong>postgres</strong> '
            rf"\({re.escape(str(escape(APP)))}\), idle in transaction\.",
            shown,
        ), shown
    assert age(first) < age(later)
    assert oldest_transaction(http.get("/ui").text) == "Oldest open transaction on the database: none."


def shown_once_older_than(api: LiveApi, http: httpx.Client, seconds: float) -> str:
    """The overview's line, read once the transaction is at least ``seconds`` old (a wait, not a sleep)."""
    deadline = time.monotonic() + 30
    while (api.store.health_stats().oldest_transaction_age_seconds or 0) < seconds and time.monotonic() < deadline:
        time.sleep(0.1)
    shown = oldest_transaction(http.get("/ui").text)
    assert shown is not None
    return shown


def age(shown: str) -> int:
    found = re.search(r'data-figure="oldest-transaction-age">(\d+) s<', shown)
    assert found, shown
    return int(found.group(1))
