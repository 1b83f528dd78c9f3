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

# The item outcomes a heartbeat or a completion carries, and what they change in the job's
# counts: an item re-run after it failed (a retry past max_item_failures) moves from failed
# to its new state, so its old outcome is subtracted: job_items as it was before this
# statement (one snapshot for the whole statement). Each result is JSON text (a null result
# stays JSON null).
ITEM_INPUT = """
    SELECT x.*
    FROM jsonb_to_recordset(%(items)s::jsonb)
         AS x(job_id uuid, item_index int, state text, result text, error text, error_group text)
"""


ITEM_DELTAS = """
    SELECT x.job_id,
           count(*) FILTER (WHERE x.state = 'ok') - count(p.state) FILTER (WHERE p.state = 'ok') AS ok,
           count(*) FILTER (WHERE x.state = 'failed') - count(p.state) FILTER (WHERE p.state = 'failed') AS failed
    FROM item_input AS x
    LEFT JOIN LATERAL (
        -- one primary-key probe per item (OFFSET 0 keeps it a probe): joined as a set, a plan
        -- prepared while job_items was small would read all of it for every heartbeat after
        SELECT p.state FROM job_items AS p
        WHERE p.job_id = x.job_id AND p.item_index = x.item_index
        OFFSET 0
    ) AS p ON true
    GROUP BY x.job_id
"""


# Invariant 1: only the items of a job whose fenced update matched (``written``) are stored.
STORE_ITEMS = """
    INSERT INTO job_items AS i (job_id, item_index, state, result, error, error_group, attempt, finished_at)
    SELECT x.job_id, x.item_index, x.state, x.result::jsonb, x.error, x.error_group, w.attempts, w.ts
    FROM item_input AS x JOIN written AS w ON w.id = x.job_id
    ON CONFLICT (job_id, item_index) DO UPDATE
    SET state = excluded.state, result = excluded.result, error = excluded.error,
        error_group = excluded.error_group, attempt = excluded.attempt, finished_at = excluded.finished_at
"""


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
                after_index=-1 if query.after_index is None else query.after_index,
                limit=limit,
            ),
        )
        if not rows:
            raise JobNotFound(query.job_id)
        return item_page([row for row in rows if row["item_index"] is not None], query.limit, READ)


def item_batch(outcomes: Sequence[tuple[Lease, Sequence[ItemOutcome]]]) -> str:
    """The item outcomes of one statement as one JSON parameter (see ITEM_INPUT); each
    result is JSON text inside it, read back as jsonb."""
    return json.dumps([row for lease, items in outcomes for row in item_rows(lease, items)])
