-- name: delete_schedule
DELETE FROM schedules WHERE name = :name RETURNING name

-- name: list_schedules
SELECT * FROM schedules ORDER BY name

-- name: advance_schedule
-- Compare-and-set: only the pass that read this next_run_at moves it on (one writer per tick).
UPDATE schedules
SET next_run_at = :next_run_at,
    last_run_at = coalesce(:tick, last_run_at),
    last_job_id = coalesce(:job_id, last_job_id),
    updated_at = {{now}}
WHERE name = :name AND next_run_at = :expected AND NOT paused
RETURNING name

-- name: set_paused
UPDATE schedules
SET paused = :paused, next_run_at = coalesce(:next_run_at, next_run_at), updated_at = {{now}}
WHERE name = :name
RETURNING *
