-- name: changed_scopes
-- The scopes a change touches: the one named, or for tenant:* every tenant with a counter
-- or active jobs; each with its limit in force (a tenant's own, else tenant:*'s).
WITH wanted AS (
    SELECT :scope AS scope WHERE :scope <> 'tenant:*'
    UNION SELECT scope FROM scope_counters WHERE :scope = 'tenant:*' AND scope LIKE 'tenant:%'
    UNION SELECT DISTINCT 'tenant:' || tenant FROM jobs WHERE :scope = 'tenant:*' AND state IN ('queued', 'running')
)
SELECT w.scope,
       coalesce(own.concurrency, d.concurrency) AS concurrency,
       coalesce(own.rate, d.rate) AS rate,
       coalesce(own.per_seconds, d.per_seconds) AS per_seconds,
       (SELECT count(*) FROM jobs AS j WHERE j.state = 'running'
          AND w.scope IN ({{job_scopes(j)}})) AS running
FROM wanted AS w
LEFT JOIN limits AS own ON own.scope = w.scope
LEFT JOIN limits AS d ON d.scope = 'tenant:*' AND w.scope LIKE 'tenant:%'

-- name: drop_counter
-- A scope left without a concurrency or rate limit loses its counter.
DELETE FROM scope_counters WHERE scope = :scope

-- name: put_counter
-- A limited scope's counter made to agree with its limit and its running jobs; the rate window
-- is kept unless the rate changed.
INSERT INTO scope_counters AS c (scope, running, concurrency, rate, per_seconds)
VALUES (:scope, :running, :concurrency, :rate, :per_seconds)
ON CONFLICT (scope) DO UPDATE
SET running = excluded.running, concurrency = excluded.concurrency, rate = excluded.rate,
    per_seconds = excluded.per_seconds,
    window_start = CASE WHEN c.rate IS excluded.rate AND c.per_seconds IS excluded.per_seconds
                        THEN c.window_start END,
    window_starts = CASE WHEN c.rate IS excluded.rate AND c.per_seconds IS excluded.per_seconds
                         THEN c.window_starts ELSE 0 END
