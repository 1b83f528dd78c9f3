-- fragment: range
-- The batch being folded: finished jobs past the watermark, up to the batch's last
-- (finished_at, id).
finished_at >= :mark_at AND (finished_at, id) > (:mark_at, :mark_id) AND (finished_at, id) <= (:last_at, :last_id)
  AND state IN ('succeeded', 'failed', 'cancelled')

-- name: mark
-- The watermark: the last (finished_at, job id) folded ('' before the first fold).
SELECT coalesce(finished_at, '') AS finished_at, coalesce(job_id, '') AS job_id
FROM rollup_watermark WHERE name = 'daily'

-- name: batch_keys
-- The next batch past the watermark, in (finished_at, id) order, settled for :settle seconds.
SELECT finished_at, id
FROM jobs
WHERE finished_at >= :mark_at AND (finished_at, id) > (:mark_at, :mark_id)
  AND finished_at < strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :settle || ' seconds')
  AND state IN ('succeeded', 'failed', 'cancelled')
ORDER BY finished_at, id
LIMIT :limit

-- name: fold_counts
-- The batch's counts added to its days' rollup rows (exactly once: the watermark moves in the
-- same transaction).
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
WHERE {{range}}
GROUP BY substr(finished_at, 1, 10), tenant, queue, kind
ON CONFLICT (day, tenant, queue, kind) DO UPDATE
SET succeeded = succeeded + excluded.succeeded,
    failed = failed + excluded.failed,
    cancelled = cancelled + excluded.cancelled,
    retried = retried + excluded.retried,
    retried_twice = retried_twice + excluded.retried_twice,
    attempts = attempts + excluded.attempts,
    run_seconds = run_seconds + excluded.run_seconds

-- name: fold_histograms
-- The batch's run and wait times added to its days' histograms (the wait of each job's first
-- claim).
INSERT INTO job_daily_histogram (day, measure, tenant, queue, kind, bucket, seconds, jobs)
SELECT day, measure, tenant, queue, kind, bucket, json_extract(:bucket_seconds, '$[' || bucket || ']'), count(*)
FROM (
    SELECT substr(finished_at, 1, 10) AS day, 'run' AS measure, tenant, queue, kind,
           width_bucket((julianday(finished_at) - julianday(started_at)) * 86400.0, :bounds) AS bucket
    FROM jobs
    WHERE {{range}} AND state = 'succeeded'
    UNION ALL
    SELECT substr(j.finished_at, 1, 10), 'wait', j.tenant, j.queue, j.kind,
           width_bucket((julianday(a.started_at) - julianday(a.due_at)) * 86400.0, :bounds)
    FROM (SELECT * FROM jobs WHERE {{range}}) AS j
    JOIN job_attempts AS a ON a.job_id = j.id AND a.claim = 1
) AS m
WHERE bucket IS NOT NULL
GROUP BY day, measure, tenant, queue, kind, bucket
ON CONFLICT (day, measure, tenant, queue, kind, bucket) DO UPDATE SET jobs = jobs + excluded.jobs

-- name: move_watermark
-- The watermark moved to the batch's last job, in the transaction that folded it.
UPDATE rollup_watermark SET finished_at = :last_at, job_id = :last_id WHERE name = 'daily'
