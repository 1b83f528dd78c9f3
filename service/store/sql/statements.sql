-- name: read_attempt_receipt
-- After a finish whose commit outcome is unknown (connection lost), the attempt's
-- own row says whether our write landed: the outcome we wrote is the receipt.
SELECT a.outcome, j.state, j.run_after
FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
WHERE a.job_id = :job_id AND a.claim = :claim AND a.worker = :owner
