
UPDATE jobs
SET state = 'succeeded',
    result_id = :result_id,
    total = coalesce(:total, total),
    done = CASE WHEN coalesce(:total, total) > 0 THEN coalesce(:total, total) ELSE coalesce(:done, done) END,
    items_ok = items_ok + :ok_delta,
    items_failed = items_failed + :failed_delta,
    lease_expires_at = NULL,
    finished_at = :now,
    updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner AND state = 'running'
RETURNING id, dependents_version
