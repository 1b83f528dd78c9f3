
UPDATE jobs
SET state = CASE WHEN cancel_requested THEN 'cancelled' WHEN :retry THEN 'queued' ELSE 'failed' END,
    error = coalesce(:error, error),
    error_group = coalesce(:error_group, error_group),
    run_after = CASE WHEN NOT cancel_requested AND :retry
                     THEN strftime('%Y-%m-%d %H:%M:%f', :now, :delay || ' seconds') ELSE run_after END,
    lease_owner = CASE WHEN NOT cancel_requested AND :retry THEN NULL ELSE lease_owner END,
    lease_expires_at = NULL,
    finished_at = CASE WHEN NOT cancel_requested AND :retry THEN NULL ELSE :now END,
    updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner AND state = 'running'
RETURNING state, run_after
