"""The rollup's fold reads from its watermark on, not the whole history before it.

Its first version joined the watermark row to ``jobs`` and so walked
``ix_jobs_finished_at`` from the first finished job on every batch: 5 s a batch at
4.2 M jobs, invisible on a small table's timings. Here the seeded history
(tests/plans.py: 20,000 finished jobs) is folded, and then a fold with nothing
left to do must touch a handful of pages on PostgreSQL, and search the index
from the watermark (not scan it) on SQLite.
"""

from __future__ import annotations

import json
from typing import Any

from service.maintenance.rollup import BUCKET_BOUNDS, BUCKET_SECONDS, SETTLE_SECONDS, Rollup
from service.store.postgres.rollup import FOLD_ROLLUP
from service.store.sqlite.rollup import BATCH_KEYS
from tests.conftest import Database
from tests.plans import explained, seed

# A fold past the end reads the watermark's row and descends one index: a few pages.
# Walking the history's index entries and heap rows would read hundreds.
PAGES_OF_A_FOLD_WITH_NOTHING_TO_DO = 40
# The planner's choice depends on the batch against the history: 10,000 of 4.2 M jobs is
# what misled it, and 50 of 20,000 is the same ratio.
BATCH = 50


def _pages_read(plan: dict[str, Any]) -> int:
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def test_a_fold_at_the_end_of_the_history_reads_from_the_watermark_not_the_whole_index(
    db: Database, make_store: Any, store_url: str
) -> None:
    seed(db, make_store, store_url)
    folded = Rollup(make_store(store_url)).run_until_done()
    assert folded >= 19_000  # all but the jobs finished within the settle time

    if db.dialect == "postgresql":
        params = {
            "now": None,
            "settle": SETTLE_SECONDS,
            "limit": BATCH,
            "bounds": BUCKET_BOUNDS,
            "bucket_seconds": BUCKET_SECONDS,
        }
        db.execute("BEGIN")
        try:
            [row] = db.rows("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + FOLD_ROLLUP, **params)
        finally:
            db.execute("ROLLBACK")
        plan = explained(row)[0]["Plan"]
        shown = json.dumps(plan, indent=1)
        assert _pages_read(plan) <= PAGES_OF_A_FOLD_WITH_NOTHING_TO_DO, shown
        history_pages = db.scalar("SELECT relpages FROM pg_class WHERE relname = 'jobs'")
        assert history_pages > 10 * PAGES_OF_A_FOLD_WITH_NOTHING_TO_DO  # the bound means something
    else:
        mark = db.one("SELECT finished_at, job_id FROM rollup_watermark WHERE name = 'daily'")
        rows = db.rows(
            "EXPLAIN QUERY PLAN " + BATCH_KEYS,
            mark_at=mark["finished_at"].strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
            mark_id=str(mark["job_id"]),
            now="now",
            settle=SETTLE_SECONDS,
            limit=BATCH,
        )
        details = [str(r["detail"]) for r in rows]
        # "SEARCH jobs USING INDEX ix (finished_at>?)" starts at the watermark; "SCAN jobs …" reads from the start.
        assert any(d.startswith("SEARCH jobs USING") and "finished_at>" in d for d in details), details
        assert not any(d.startswith("SCAN jobs") for d in details), details
