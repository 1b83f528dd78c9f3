
UPDATE jobs
SET state = 'cancelled', lease_expires_at = NULL, finished_at = :now, updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner AND state = 'running'
RETURNING id
