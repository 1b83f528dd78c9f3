
UPDATE jobs
SET state = 'running',
    attempts = attempts + 1,
    claims = claims + 1,
    max_attempts = coalesce(
        max(attempts + 1, CASE WHEN max_attempts_default
                               THEN (SELECT value FROM json_each(:kind_max_attempts) WHERE key = jobs.kind)
                               ELSE min(max_attempts,
                                        (SELECT value FROM json_each(:kind_max_attempts) WHERE key = jobs.kind))
                          END),
        max_attempts),
    lease_owner = :worker,
    lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', :now, :lease_seconds || ' seconds'),
    started_at = :now,
    updated_at = :now
WHERE id = :id AND state = 'queued'
RETURNING id, kind, queue, tenant, payload, checkpoint, done, total, attempts, claims, max_attempts,
          lease_expires_at, run_after, items_ok, items_failed
