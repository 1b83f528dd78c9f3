
INSERT INTO job_attempts (job_id, claim, attempt, worker, due_at, started_at)
VALUES (:job_id, :claim, :attempt, :owner, :due_at, :now)
