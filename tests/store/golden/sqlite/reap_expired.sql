
SELECT j.id, j.attempts, j.claims, j.max_attempts, j.lease_owner, j.cancel_requested,
       (SELECT count(*) FROM job_attempts AS a
        WHERE a.job_id = j.id AND a.outcome = 'lease_expired') + 1 AS expiries
FROM jobs AS j
WHERE j.state = 'running' AND j.lease_expires_at < :now
ORDER BY j.id
LIMIT :limit
