-- name: workflow_progress
-- A workflow's progress (the console's job page, GET /v1/jobs/{id}/dependencies): its jobs
-- counted by state in one read of ix_jobs_workflow_id_id, which holds that workflow's jobs and
-- no other (its cost is the workflow's size, never the history's); the queued ones waiting
-- for parents counted apart. Scoped by :tenant like every job read (a workflow's jobs are all
-- one tenant's: parents must be, and a handler's children are its own tenant's).
SELECT count(*) FILTER (WHERE state = 'queued') AS queued,
       count(*) FILTER (WHERE state = 'queued' AND parents_pending > 0) AS waiting,
       count(*) FILTER (WHERE state = 'running') AS running,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'failed') AS failed,
       count(*) FILTER (WHERE state = 'cancelled') AS cancelled
FROM jobs
WHERE workflow_id = :workflow_id AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
