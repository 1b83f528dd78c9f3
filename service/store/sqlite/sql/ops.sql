-- name: cancel_job
-- Cancel: a queued job ends cancelled at once; a running one is asked to stop (its worker
-- acknowledges).
UPDATE jobs
SET state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
    cancel_requested = (state = 'running'),
    finished_at = CASE WHEN state = 'queued' THEN :now ELSE finished_at END,
    updated_at = :now
WHERE id = :job_id AND (:tenant IS NULL OR tenant = :tenant) AND state IN ('queued', 'running')
RETURNING {{status_columns}}

-- name: find_replayable
-- Invariant 5: terminal jobs change only through replay, and every replay is recorded.
SELECT id, tenant, state, error, attempts FROM jobs
WHERE state IN (SELECT value FROM json_each(:states))
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
  AND (:kind IS NULL OR kind = :kind)
  AND (:error_like IS NULL OR error LIKE :error_like ESCAPE '\')
  AND (:error_group IS NULL OR error_group = :error_group)
  AND (:since IS NULL OR finished_at >= :since)
  AND (NOT :failed_items OR items_failed > 0)
ORDER BY id

-- name: replay_job
-- Invariant 5: a failed or cancelled job back to queued, attempts zero (with :failed_items,
-- its failed items only).
UPDATE jobs
SET state = 'queued', attempts = 0, error = NULL, error_group = NULL, cancel_requested = 0, lease_owner = NULL,
    lease_expires_at = NULL, run_after = :now, finished_at = NULL,
    items_failed = CASE WHEN :failed_items THEN 0 ELSE items_failed END,
    done = CASE WHEN :failed_items THEN items_ok ELSE done END,
    updated_at = :now
WHERE id = :job_id

-- name: clear_failed_items
-- A replay of failed items: their outcomes go, the ok ones stay (the next attempt skips those).
DELETE FROM job_items WHERE job_id = :job_id AND state = 'failed'

-- name: record_replay
-- Invariant 5: every replay is recorded, with the state, error and attempts it replaced.
INSERT INTO job_replays (job_id, replayed_at, replayed_by, previous_state, previous_error,
                         previous_attempts)
VALUES (:job_id, :now, :by, :state, :error, :attempts)

-- name: make_due
-- An operator's "run now" for a queued job that waits (a delay, a retry's backoff): due now,
-- nothing else changed. A running, a terminal or an already due job matches nothing.
UPDATE jobs
SET run_after = :now, updated_at = :now
WHERE id = :job_id AND state = 'queued' AND run_after > :now
RETURNING {{status_columns}}
