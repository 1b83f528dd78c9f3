-- name: fold_rollup
-- Invariant: each finished job is folded exactly once. The watermark row is locked for the
-- statement (SKIP LOCKED: a second folder finds no row and folds nothing), the batch is the
-- next jobs in (finished_at, id) order past it, and the counts, the histograms and the new
-- watermark are written by this one statement: all or nothing. Only jobs finished more than
-- :settle seconds ago: a finish commits after its finished_at (its transaction's start).
-- The batch reads ix_jobs_finished_at from the watermark on; the first claim's attempt by
-- uq_job_attempts_job_id_claim. Every group key is unique within an INSERT (GROUP BY).
WITH mark AS (
    SELECT coalesce(finished_at, '-infinity') AS finished_at,
           coalesce(job_id, '00000000-0000-0000-0000-000000000000') AS job_id
    FROM rollup_watermark
    WHERE name = 'daily'
    FOR UPDATE SKIP LOCKED
),
batch AS (
    SELECT j.id, j.finished_at, j.tenant, j.queue, j.kind, j.state, j.attempts,
           (j.finished_at AT TIME ZONE 'UTC')::date AS day,
           CASE WHEN j.state IN ('succeeded', 'failed')
                THEN date_part('epoch', j.finished_at - j.started_at) END AS run_seconds,
           (SELECT date_part('epoch', a.started_at - a.due_at)
            FROM job_attempts AS a WHERE a.job_id = j.id AND a.claim = 1) AS wait_seconds
    FROM jobs AS j
    -- Scalar subqueries, evaluated once: the index scan starts at the watermark. (A join to
    -- mark scanned ix_jobs_finished_at from its first entry on every batch.)
    WHERE j.finished_at >= (SELECT finished_at FROM mark)
      AND (j.finished_at, j.id) > (SELECT finished_at, job_id FROM mark)
      AND j.finished_at < {{now}} - make_interval(secs => :settle)
      AND j.state IN ('succeeded', 'failed', 'cancelled')
    ORDER BY j.finished_at, j.id
    LIMIT :limit
),
counted AS (
    INSERT INTO job_daily_rollup AS r
           (day, tenant, queue, kind, succeeded, failed, cancelled, retried, retried_twice, attempts, run_seconds)
    SELECT day, tenant, queue, kind,
           count(*) FILTER (WHERE state = 'succeeded'),
           count(*) FILTER (WHERE state = 'failed'),
           count(*) FILTER (WHERE state = 'cancelled'),
           count(*) FILTER (WHERE state IN ('succeeded', 'failed') AND attempts > 1),
           count(*) FILTER (WHERE state IN ('succeeded', 'failed') AND attempts > 2),
           coalesce(sum(attempts) FILTER (WHERE state IN ('succeeded', 'failed')), 0),
           coalesce(sum(run_seconds), 0)
    FROM batch
    GROUP BY day, tenant, queue, kind
    ON CONFLICT (day, tenant, queue, kind) DO UPDATE
    SET succeeded = r.succeeded + excluded.succeeded,
        failed = r.failed + excluded.failed,
        cancelled = r.cancelled + excluded.cancelled,
        retried = r.retried + excluded.retried,
        retried_twice = r.retried_twice + excluded.retried_twice,
        attempts = r.attempts + excluded.attempts,
        run_seconds = r.run_seconds + excluded.run_seconds
),
bucketed AS (
    INSERT INTO job_daily_histogram AS h (day, measure, tenant, queue, kind, bucket, seconds, jobs)
    SELECT b.day, m.measure, b.tenant, b.queue, b.kind, m.bucket,
           (:bucket_seconds::float8[])[m.bucket + 1], count(*)
    FROM batch AS b
    CROSS JOIN LATERAL (VALUES ('run', width_bucket(CASE WHEN b.state = 'succeeded' THEN b.run_seconds END,
                                                    :bounds::float8[])),
                               ('wait', width_bucket(b.wait_seconds, :bounds::float8[]))) AS m(measure, bucket)
    WHERE m.bucket IS NOT NULL
    GROUP BY b.day, m.measure, b.tenant, b.queue, b.kind, m.bucket
    ON CONFLICT (day, measure, tenant, queue, kind, bucket) DO UPDATE SET jobs = h.jobs + excluded.jobs
),
moved AS (
    UPDATE rollup_watermark AS w
    SET finished_at = last.finished_at, job_id = last.id
    FROM (SELECT finished_at, id FROM batch ORDER BY finished_at DESC, id DESC LIMIT 1) AS last
    WHERE w.name = 'daily'
)
SELECT count(*) AS folded FROM batch
