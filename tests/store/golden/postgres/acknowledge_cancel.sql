
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS ts
),
stopped AS (
    UPDATE jobs AS j
    SET state = 'cancelled', lease_expires_at = NULL, finished_at = n.ts, updated_at = n.ts
    FROM n
    WHERE j.id = %(job_id)s AND j.claims = %(claim)s AND j.attempts = %(attempt)s AND j.lease_owner = %(owner)s AND j.state = 'running'
    RETURNING j.id, j.tenant, j.kind, j.queue, j.concurrency_key, CASE WHEN %(notify)s THEN pg_notify('jobq_job_changes', j.id::text) END AS notified
),freed AS (
    UPDATE scope_counters AS c
    SET running = c.running - e.jobs
    FROM (
        SELECT s.scope, count(*) AS jobs
        FROM stopped AS e CROSS JOIN LATERAL unnest(ARRAY['tenant:' || e.tenant, 'kind:' || e.kind, 'queue:' || e.queue, 'key:' || e.concurrency_key]) AS s(scope)
        WHERE s.scope IS NOT NULL
        GROUP BY s.scope
        ORDER BY s.scope
    ) AS e
    WHERE c.scope = e.scope
),
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'cancelled'
    FROM stopped, n
    WHERE a.job_id = stopped.id AND a.claim = %(claim)s AND a.finished_at IS NULL
)
SELECT count(*) AS stopped FROM stopped
