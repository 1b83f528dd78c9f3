
UPDATE job_attempts
SET finished_at = :now, outcome = :outcome, error = :error
WHERE job_id = :job_id AND claim = :claim AND finished_at IS NULL
