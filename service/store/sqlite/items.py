"""Per-item outcomes on SQLite: written with the heartbeat or the completion that
carries them (in its transaction, only if its fenced write matched), and the item pages."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from service.errors import JobNotFound
from service.jobs import ItemPage, ItemQuery, ItemState, Lease
from service.store import checks
from service.store.rows import item_page
from service.store.sqlfiles import statements
from service.store.sqlite.connection import READ, Connected
from service.store.sqlite.queries import JOB_EXISTS, LIST_FAILED_ITEMS, LIST_ITEMS

_SQL = statements("sqlite")

PRIOR_ITEM_STATES = _SQL["prior_item_states"]
STORE_ITEM = _SQL["store_item"]


class Items(Connected):
    """list_items: a job's item outcomes, a page at a time."""

    def list_items(self, query: ItemQuery) -> ItemPage:
        limit = checks.page_limit(query.limit)
        params = {
            "job_id": str(query.job_id),
            "tenant": query.tenant,
            "state": query.state.value if query.state else None,
            "after_index": checks.item_cursor(query.after_index),
            "limit": limit,
        }
        with self._read() as (conn, _now):
            if conn.execute(JOB_EXISTS, params).fetchone() is None:
                raise JobNotFound(query.job_id)
            rows = conn.execute(LIST_FAILED_ITEMS if query.state is ItemState.FAILED else LIST_ITEMS, params).fetchall()
        return item_page(rows, query.limit, READ)


def item_deltas(conn: sqlite3.Connection, lease: Lease, rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    """What writing ``rows`` changes in the job's counts (an outcome replaced is taken back)."""
    ok = sum(1 for row in rows if row["state"] == "ok")
    failed = len(rows) - ok
    if rows:
        indexes = json.dumps([row["item_index"] for row in rows])
        for prior in conn.execute(PRIOR_ITEM_STATES, {"job_id": str(lease.job_id), "indexes": indexes}):
            if prior["state"] == "ok":
                ok -= prior["n"]
            else:
                failed -= prior["n"]
    return {"ok_delta": ok, "failed_delta": failed}


def store_items(conn: sqlite3.Connection, rows: Sequence[dict[str, Any]], now: str) -> None:
    conn.executemany(STORE_ITEM, [{**row, "now": now} for row in rows])
