-- name: delete_schedule
-- A schedule removed by name; no row: there was none.
DELETE FROM schedules WHERE name = :name RETURNING name

-- name: list_schedules
-- Every schedule, by name.
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
-- Pause or resume a schedule; resuming sets the next tick the caller worked out.
UPDATE schedules
SET paused = :paused, next_run_at = coalesce(:next_run_at, next_run_at), updated_at = {{now}}
WHERE name = :name
RETURNING *
