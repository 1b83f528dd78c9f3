-- name: cancel_job
-- A queued job is cancelled at once; a running one is asked to stop and its
-- worker sees cancel_requested on its next heartbeat. Terminal jobs match nothing.
UPDATE jobs AS j
SET state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
    cancel_requested = (state = 'running'),
    finished_at = CASE WHEN state = 'queued' THEN {{now}} ELSE finished_at END,
    updated_at = {{now}}
WHERE id = :job_id AND (:tenant::text IS NULL OR tenant = :tenant)
  AND state IN ('queued', 'running')
RETURNING {{status_columns}}, {{notify_changed}}

-- name: replay_jobs
-- Invariant 5: a terminal job changes only through replay, and each replay is
-- recorded in job_replays with who asked and what the job was before. A replay of
-- failed items picks jobs (succeeded ones too) that have some, and removes only those outcomes.
WITH n AS (
    SELECT {{now}} AS ts
),
picked AS (
    SELECT id, state, error, attempts
    FROM jobs
    WHERE state = ANY(:states::text[])
      AND (:tenant::text IS NULL OR tenant = :tenant)
      AND (cardinality(:ids::uuid[]) = 0 OR id = ANY(:ids::uuid[]))
      AND (:kind::text IS NULL OR kind = :kind)
      AND (:error_like::text IS NULL OR error ILIKE :error_like)
      AND (:error_group::text IS NULL OR error_group = :error_group)
      AND (:since::timestamptz IS NULL OR finished_at >= :since::timestamptz)
      AND (NOT :failed_items OR items_failed > 0)
    ORDER BY id
    FOR UPDATE SKIP LOCKED
),
cleared AS (
    -- Re-running only the failed items: their outcomes go, the ok ones stay (the next attempt skips those).
    DELETE FROM job_items AS i
    USING picked
    WHERE :failed_items AND i.job_id = picked.id AND i.state = 'failed'
),
replayed AS (
    UPDATE jobs AS j
    SET state = 'queued', attempts = 0, error = NULL, error_group = NULL, cancel_requested = false,
        lease_owner = NULL, lease_expires_at = NULL, run_after = n.ts, finished_at = NULL,
        items_failed = CASE WHEN :failed_items THEN 0 ELSE j.items_failed END,
        done = CASE WHEN :failed_items THEN j.items_ok ELSE j.done END,
        updated_at = n.ts
    FROM picked, n
    WHERE j.id = picked.id
    RETURNING j.id, j.tenant, {{notify_changed}}
),{{tenant_counters(replayed)}},
recorded AS (
    INSERT INTO job_replays (job_id, replayed_at, replayed_by, previous_state, previous_error,
                             previous_attempts)
    SELECT picked.id, n.ts, :by, picked.state, picked.error, picked.attempts FROM picked, n
)
SELECT id FROM replayed ORDER BY id

-- name: make_due
-- An operator's "run now" for a queued job that waits (a delay, a retry's backoff): due now,
-- nothing else changed (its attempts, priority and place by priority stay). A running, a
-- terminal or an already due job matches nothing.
UPDATE jobs AS j
SET run_after = {{now}}, updated_at = {{now}}
WHERE id = :job_id AND state = 'queued' AND run_after > {{now}}
RETURNING {{status_columns}}, {{notify_changed}}
