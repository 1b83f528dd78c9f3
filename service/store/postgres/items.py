"""Per-item outcomes on PostgreSQL: the pieces that RENEW_LEASE and COMPLETE_JOBS embed
to write them (fenced with the job's own write), and the item pages."""

from __future__ import annotations

import json
from collections.abc import Sequence

from service.errors import JobNotFound
from service.jobs import ItemOutcome, ItemPage, ItemQuery, ItemState, Lease
from service.store import checks
from service.store.encoding import item_rows
from service.store.postgres.connection import READ, Connected
from service.store.postgres.queries import LIST_FAILED_ITEMS, LIST_ITEMS
from service.store.rows import item_page
from service.store.sqlfiles import statements

_SQL = statements("postgres")


class Items(Connected):
    """list_items: a job's item outcomes, a page at a time."""

    def list_items(self, query: ItemQuery) -> ItemPage:
        limit = checks.page_limit(query.limit)
        rows = self._fetchall(
            LIST_FAILED_ITEMS if query.state is ItemState.FAILED else LIST_ITEMS,
            self._params(
                job_id=query.job_id,
                tenant=query.tenant,
                state=query.state.value if query.state else None,
                after_index=checks.item_cursor(query.after_index),
                limit=limit,
            ),
            replay=True,
        )
        if not rows:
            raise JobNotFound(query.job_id)
        return item_page([row for row in rows if row["item_index"] is not None], query.limit, READ)


def item_batch(outcomes: Sequence[tuple[Lease, Sequence[ItemOutcome]]], max_result_bytes: int) -> str:
    """The item outcomes of one statement as one JSON parameter (see ITEM_INPUT); each
    result is JSON text inside it, read back as jsonb."""
    return json.dumps([row for lease, items in outcomes for row in item_rows(lease, items, max_result_bytes)])
