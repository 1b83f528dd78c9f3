
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS ts
),
decision AS (
    SELECT id,
           CASE WHEN cancel_requested THEN 'cancelled'
                WHEN %(retry)s THEN 'queued'
                ELSE 'failed' END AS next_state
    FROM jobs
    WHERE id = %(job_id)s
),
changed AS (
    UPDATE jobs AS j
    SET state = d.next_state,
        error = %(error)s,
        error_group = %(error_group)s,
        run_after = CASE WHEN d.next_state = 'queued'
                         THEN n.ts + make_interval(secs => %(delay)s) ELSE j.run_after END,
        lease_owner = CASE WHEN d.next_state = 'queued' THEN NULL ELSE j.lease_owner END,
        lease_expires_at = NULL,
        finished_at = CASE WHEN d.next_state = 'queued' THEN NULL ELSE n.ts END,
        updated_at = n.ts
    FROM decision AS d, n
    WHERE j.id = d.id AND j.id = %(job_id)s AND j.claims = %(claim)s AND j.attempts = %(attempt)s AND j.lease_owner = %(owner)s AND j.state = 'running'
    RETURNING j.id, j.state, j.run_after, j.tenant, j.kind, j.queue, j.concurrency_key, CASE WHEN %(notify)s THEN pg_notify('jobq_job_changes', j.id::text) END AS notified
),freed AS (
    UPDATE scope_counters AS c
    SET running = c.running - e.jobs
    FROM (
        SELECT s.scope, count(*) AS jobs
        FROM changed AS e CROSS JOIN LATERAL unnest(ARRAY['tenant:' || e.tenant, 'kind:' || e.kind, 'queue:' || e.queue, 'key:' || e.concurrency_key]) AS s(scope)
        WHERE s.scope IS NOT NULL
        GROUP BY s.scope
        ORDER BY s.scope
    ) AS e
    WHERE c.scope = e.scope
),
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'failed', error = %(error)s
    FROM changed, n
    WHERE a.job_id = changed.id AND a.claim = %(claim)s AND a.finished_at IS NULL
)
SELECT state, run_after FROM changed
