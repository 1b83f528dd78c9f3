-- name: job_ids_in_range
-- The console's "open a job by the start of its id": the ids between a prefix's lowest
-- and highest id, through the primary key (a range read however many jobs there are).
-- Two are enough to tell "this one" from "ambiguous"; the caller asks for a few more.
SELECT id FROM jobs
WHERE id >= :low AND id <= :high
ORDER BY id
LIMIT :limit

-- name: job_replays
-- A job's replays, oldest first, through ix_job_replays_job_id: invariant 5 (a terminal
-- job changes only through replay, and the replay is recorded), shown on the job page.
SELECT replayed_at, replayed_by, previous_state, previous_error, previous_attempts
FROM job_replays
WHERE job_id = :job_id
ORDER BY id
