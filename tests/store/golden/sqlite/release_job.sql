
UPDATE jobs
SET state = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'queued' END,
    attempts = CASE WHEN cancel_requested THEN attempts ELSE attempts - 1 END,
    lease_owner = CASE WHEN cancel_requested THEN lease_owner END,
    lease_expires_at = NULL,
    run_after = CASE WHEN cancel_requested THEN run_after ELSE :now END,
    finished_at = CASE WHEN cancel_requested THEN :now END,
    updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner AND state = 'running'
RETURNING state
