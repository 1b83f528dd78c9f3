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

_RANGE = """
finished_at >= :mark_at AND (finished_at, id) > (:mark_at, :mark_id) AND (finished_at, id) <= (:last_at, :last_id)
  AND state IN ('succeeded', 'failed', 'cancelled')
"""

MARK = """
SELECT coalesce(finished_at, '') AS finished_at, coalesce(job_id, '') AS job_id
FROM rollup_watermark WHERE name = 'daily'
"""

# The next batch past the watermark, in (finished_at, id) order, settled for :settle seconds.
BATCH_KEYS = """
SELECT finished_at, id
FROM jobs
WHERE finished_at >= :mark_at AND (finished_at, id) > (:mark_at, :mark_id)
  AND finished_at < strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :settle || ' seconds')
  AND state IN ('succeeded', 'failed', 'cancelled')
ORDER BY finished_at, id
LIMIT :limit
"""

FOLD_COUNTS = f"""
INSERT INTO job_daily_rollup (day, tenant, queue, kind, succeeded, failed, cancelled, retried, retried_twice, attempts,
                              run_seconds)
SELECT substr(finished_at, 1, 10), tenant, queue, kind,
       count(*) FILTER (WHERE state = 'succeeded'),
       count(*) FILTER (WHERE state = 'failed'),
       count(*) FILTER (WHERE state = 'cancelled'),
       count(*) FILTER (WHERE state IN ('succeeded', 'failed') AND attempts > 1),
       count(*) FILTER (WHERE state IN ('succeeded', 'failed') AND attempts > 2),
       coalesce(sum(attempts) FILTER (WHERE state IN ('succeeded', 'failed')), 0),
       coalesce(sum((julianday(finished_at) - julianday(started_at)) * 86400.0)
                FILTER (WHERE state IN ('succeeded', 'failed')), 0)
FROM jobs
WHERE {_RANGE}
GROUP BY substr(finished_at, 1, 10), tenant, queue, kind
ON CONFLICT (day, tenant, queue, kind) DO UPDATE
SET succeeded = succeeded + excluded.succeeded,
    failed = failed + excluded.failed,
    cancelled = cancelled + excluded.cancelled,
    retried = retried + excluded.retried,
    retried_twice = retried_twice + excluded.retried_twice,
    attempts = attempts + excluded.attempts,
    run_seconds = run_seconds + excluded.run_seconds
"""

FOLD_HISTOGRAMS = f"""
INSERT INTO job_daily_histogram (day, measure, tenant, queue, kind, bucket, seconds, jobs)
SELECT day, measure, tenant, queue, kind, bucket, json_extract(:bucket_seconds, '$[' || bucket || ']'), count(*)
FROM (
    SELECT substr(finished_at, 1, 10) AS day, 'run' AS measure, tenant, queue, kind,
           width_bucket((julianday(finished_at) - julianday(started_at)) * 86400.0, :bounds) AS bucket
    FROM jobs
    WHERE {_RANGE} AND state = 'succeeded'
    UNION ALL
    SELECT substr(j.finished_at, 1, 10), 'wait', j.tenant, j.queue, j.kind,
           width_bucket((julianday(a.started_at) - julianday(a.due_at)) * 86400.0, :bounds)
    FROM (SELECT * FROM jobs WHERE {_RANGE}) AS j
    JOIN job_attempts AS a ON a.job_id = j.id AND a.claim = 1
) AS m
WHERE bucket IS NOT NULL
GROUP BY day, measure, tenant, queue, kind, bucket
ON CONFLICT (day, measure, tenant, queue, kind, bucket) DO UPDATE SET jobs = jobs + excluded.jobs
"""

MOVE_WATERMARK = """
UPDATE rollup_watermark SET finished_at = :last_at, job_id = :last_id WHERE name = 'daily'
"""


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
