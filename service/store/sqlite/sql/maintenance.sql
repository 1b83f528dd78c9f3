-- name: reap_expired
-- Invariant 2: running jobs past their lease, compared with the store's clock,
-- in id order and in bounded batches. Idempotent: a second reaper finds nothing.
SELECT j.id, j.attempts, j.claims, j.max_attempts, j.lease_owner, j.cancel_requested,
       (SELECT count(*) FROM job_attempts AS a
        WHERE a.job_id = j.id AND a.outcome = 'lease_expired') + 1 AS expiries
FROM jobs AS j
WHERE j.state = 'running' AND j.lease_expires_at < :now
ORDER BY j.id
LIMIT :limit

-- name: prune_finished
-- Retention in small batches, oldest first; attempts, results and replays go with
-- their job (ON DELETE CASCADE, with foreign_keys on).
DELETE FROM jobs
WHERE id IN (
    SELECT id FROM jobs
    WHERE finished_at < strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :older_than || ' seconds')
      AND state IN ('succeeded', 'failed', 'cancelled')
    ORDER BY finished_at
    LIMIT :limit
)

-- name: prune_rollup_counts
-- Retention of the daily rollup: whole UTC days that ended before the cutoff, counts and
-- histograms in one write transaction (both tables' keys lead with the day).
DELETE FROM job_daily_rollup WHERE day < date(:now, '-' || :older_than || ' seconds')

-- name: prune_rollup_histograms
-- Retention of the daily rollup's histograms: days older than :older_than go.
DELETE FROM job_daily_histogram WHERE day < date(:now, '-' || :older_than || ' seconds')

-- name: count_prunable
-- How many finished jobs a prune would remove.
SELECT count(*) AS count
FROM jobs
WHERE finished_at < strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :older_than || ' seconds')
  AND state IN ('succeeded', 'failed', 'cancelled')
