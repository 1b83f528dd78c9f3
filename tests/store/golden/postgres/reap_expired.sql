
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS ts
),
expired AS (
    SELECT j.id, j.attempts, j.max_attempts, j.lease_owner, j.cancel_requested,
           (SELECT count(*) FROM job_attempts AS a
            WHERE a.job_id = j.id AND a.outcome = 'lease_expired') + 1 AS expiries
    FROM jobs AS j
    WHERE j.state = 'running' AND j.lease_expires_at < (SELECT ts FROM n)
    ORDER BY j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
reaped AS (
    UPDATE jobs AS j
    SET state = CASE WHEN e.cancel_requested THEN 'cancelled'
                     WHEN e.attempts < e.max_attempts THEN 'queued'
                     ELSE 'failed' END,
        error = CASE WHEN e.cancel_requested THEN j.error
                     ELSE format(%(lease_expired_error)s, e.expiries, e.attempts, e.max_attempts, e.lease_owner) END,
        error_group = CASE WHEN e.cancel_requested THEN j.error_group ELSE %(lease_expired)s END,
        run_after = CASE WHEN NOT e.cancel_requested AND e.attempts < e.max_attempts
                         THEN n.ts + make_interval(secs => (%(delays)s::float8[])[e.attempts])
                         ELSE j.run_after END,
        lease_owner = CASE WHEN NOT e.cancel_requested AND e.attempts < e.max_attempts
                           THEN NULL ELSE j.lease_owner END,
        lease_expires_at = NULL,
        finished_at = CASE WHEN NOT e.cancel_requested AND e.attempts < e.max_attempts
                           THEN NULL ELSE n.ts END,
        updated_at = n.ts
    FROM expired AS e, n
    WHERE j.id = e.id
    RETURNING j.id, j.state, j.claims, j.tenant, j.kind, j.queue, j.concurrency_key, j.dependents_version,
              CASE WHEN %(notify)s THEN pg_notify('jobq_job_changes', j.id::text) END AS notified
),freed AS (
    UPDATE scope_counters AS c
    SET running = c.running - e.jobs
    FROM (
        SELECT s.scope, count(*) AS jobs
        FROM reaped AS e CROSS JOIN LATERAL unnest(ARRAY['tenant:' || e.tenant, 'kind:' || e.kind, 'queue:' || e.queue, 'key:' || e.concurrency_key]) AS s(scope)
        WHERE s.scope IS NOT NULL
        GROUP BY s.scope
        ORDER BY s.scope
    ) AS e
    WHERE c.scope = e.scope
),
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'lease_expired', error = %(lease_expired)s
    FROM reaped AS r, n
    WHERE a.job_id = r.id AND a.claim = r.claims AND a.finished_at IS NULL
)
SELECT state, count(*) AS jobs,
       array_agg(id) FILTER (WHERE dependents_version <> 0 AND state IN ('failed', 'cancelled')) AS parents
FROM reaped GROUP BY state
