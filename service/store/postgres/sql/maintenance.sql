-- name: reap_expired
-- Invariant 2: a running job past its lease is reclaimed. Run by the fleet's leader,
-- fenced with its token, and idempotent all the same: SKIP LOCKED lets a leader and a
-- successor overlapping run it at once without waiting or double-reaping, rows lock in id order, and a batch is bounded. Attempts were
-- charged at claim, so a job that kills its worker every time fails after
-- max_attempts with an error that says the lease expired (invariant 3): the text is
-- service.jobs.LEASE_EXPIRED_ERROR, given as :lease_expired_error.
-- Expiry is compared with the database clock, never a worker's. An expired
-- lease is a retryable failure: while attempts remain (the retry budget, as in
-- service.retry.decide) the job is due after :delays[attempts], the delays the
-- caller drew for each attempt number; the backoff itself is decided in Python.
WITH n AS (
    SELECT {{now}} AS ts
),
expired AS (
    SELECT j.id, j.attempts, j.max_attempts, j.lease_owner, j.cancel_requested,
           (SELECT count(*) FROM job_attempts AS a
            WHERE a.job_id = j.id AND a.outcome = 'lease_expired') + 1 AS expiries
    FROM jobs AS j
    WHERE j.state = 'running' AND j.lease_expires_at < (SELECT ts FROM n)
    ORDER BY j.id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
),
reaped AS (
    UPDATE jobs AS j
    SET state = CASE WHEN e.cancel_requested THEN 'cancelled'
                     WHEN e.attempts < e.max_attempts THEN 'queued'
                     ELSE 'failed' END,
        error = CASE WHEN e.cancel_requested THEN j.error
                     ELSE format(:lease_expired_error, e.expiries, e.attempts, e.max_attempts, e.lease_owner) END,
        error_group = CASE WHEN e.cancel_requested THEN j.error_group ELSE :lease_expired END,
        run_after = CASE WHEN NOT e.cancel_requested AND e.attempts < e.max_attempts
                         THEN n.ts + make_interval(secs => (:delays::float8[])[e.attempts])
                         ELSE j.run_after END,
        lease_owner = CASE WHEN NOT e.cancel_requested AND e.attempts < e.max_attempts
                           THEN NULL ELSE j.lease_owner END,
        lease_expires_at = NULL,
        finished_at = CASE WHEN NOT e.cancel_requested AND e.attempts < e.max_attempts
                           THEN NULL ELSE n.ts END,
        updated_at = n.ts
    FROM expired AS e, n
    WHERE j.id = e.id
    RETURNING j.id, j.state, j.claims, j.tenant, j.kind, j.queue, j.concurrency_key, j.dependents_version,
              {{notify_changed}}
),{{give_back(reaped)}},
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'lease_expired', error = :lease_expired
    FROM reaped AS r, n
    WHERE a.job_id = r.id AND a.claim = r.claims AND a.finished_at IS NULL
)
-- ``parents``: the jobs that ended failed or cancelled and have dependents, which the store
-- settles next in this transaction (settle_dependents).
SELECT state, count(*) AS jobs,
       array_agg(id) FILTER (WHERE dependents_version <> 0 AND state IN ('failed', 'cancelled')) AS parents
FROM reaped GROUP BY state

-- name: prune_finished
-- Retention: terminal jobs finished before the cutoff, oldest first, a small batch
-- at a time; attempts, results and replays go with them (ON DELETE CASCADE).
-- SKIP LOCKED: pruning never waits on, or blocks, anything a worker holds.
WITH doomed AS (
    SELECT id
    FROM jobs
    WHERE finished_at < {{now}} - make_interval(secs => :older_than)
      AND state IN ('succeeded', 'failed', 'cancelled')
    ORDER BY finished_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
DELETE FROM jobs USING doomed WHERE jobs.id = doomed.id

-- name: prune_rollup
-- Retention of the daily rollup, kept longer than the jobs it counts: whole UTC days
-- that ended before the cutoff, counts and histograms in one statement (both tables'
-- keys lead with the day). Never touches a day still being folded.
WITH cutoff AS (
    SELECT (({{now}} - make_interval(secs => :older_than)) AT TIME ZONE 'UTC')::date
           AS day
),
counts AS (
    DELETE FROM job_daily_rollup WHERE day < (SELECT day FROM cutoff) RETURNING day
),
histograms AS (
    DELETE FROM job_daily_histogram WHERE day < (SELECT day FROM cutoff) RETURNING day
)
SELECT (SELECT count(*) FROM counts) + (SELECT count(*) FROM histograms) AS deleted

-- name: count_prunable
-- How many finished jobs a prune would remove.
SELECT count(*) AS count
FROM jobs
WHERE finished_at < {{now}} - make_interval(secs => :older_than)
  AND state IN ('succeeded', 'failed', 'cancelled')
