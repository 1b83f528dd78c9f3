"""The daily rollup's fold on SQLite (see service.maintenance.rollup).

SQLite has no data-modifying CTEs, so the fold is four statements in the caller's write
transaction (``BEGIN IMMEDIATE``: one folder at a time, all or nothing): the batch's
keys past the watermark, the counts, the histograms, the watermark moved to the
batch's last job. The connection needs ``width_bucket(value, bounds_json)``, which the
store registers (migration 0008 folds with frozen copies of these, and its own).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from service.store.sqlfiles import statements

_SQL = statements("sqlite")


MARK = _SQL["mark"]
BATCH_KEYS = _SQL["batch_keys"]
FOLD_COUNTS = _SQL["fold_counts"]
FOLD_HISTOGRAMS = _SQL["fold_histograms"]
MOVE_WATERMARK = _SQL["move_watermark"]


def fold(
    conn: sqlite3.Connection,
    now: str,
    bounds: Sequence[float],
    bucket_seconds: Sequence[float],
    settle_seconds: float,
    limit: int | None,
) -> int:
    """Fold the next ``limit`` settled jobs (all of them for None) inside the caller's write transaction."""
    mark = conn.execute(MARK).fetchone()
    if mark is None:
        return 0
    keys = conn.execute(
        BATCH_KEYS,
        {"mark_at": mark[0], "mark_id": mark[1], "now": now, "settle": float(settle_seconds), "limit": limit or -1},
    ).fetchall()
    if not keys:
        return 0
    params = {
        "mark_at": mark[0],
        "mark_id": mark[1],
        "last_at": keys[-1][0],
        "last_id": keys[-1][1],
        "bounds": json.dumps(list(bounds)),
        "bucket_seconds": json.dumps(list(bucket_seconds)),
    }
    conn.execute(FOLD_COUNTS, params)
    conn.execute(FOLD_HISTOGRAMS, params)
    conn.execute(MOVE_WATERMARK, params)
    return len(keys)
