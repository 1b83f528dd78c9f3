
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS ts
),
released AS (
    UPDATE jobs AS j
    SET state = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
        attempts = CASE WHEN j.cancel_requested THEN j.attempts ELSE j.attempts - 1 END,
        lease_owner = CASE WHEN j.cancel_requested THEN j.lease_owner END,
        lease_expires_at = NULL,
        run_after = CASE WHEN j.cancel_requested THEN j.run_after ELSE n.ts END,
        finished_at = CASE WHEN j.cancel_requested THEN n.ts END,
        updated_at = n.ts
    FROM n
    WHERE j.id = %(job_id)s AND j.claims = %(claim)s AND j.attempts = %(attempt)s AND j.lease_owner = %(owner)s AND j.state = 'running'
    RETURNING j.id, j.state, j.tenant, j.kind, j.queue, j.concurrency_key, CASE WHEN %(notify)s THEN pg_notify('jobq_job_changes', j.id::text) END AS notified,
              CASE WHEN %(notify)s AND j.state = 'queued' THEN pg_notify('jobq_jobs', j.queue) END AS woke
),freed AS (
    UPDATE scope_counters AS c
    SET running = c.running - e.jobs
    FROM (
        SELECT s.scope, count(*) AS jobs
        FROM released AS e CROSS JOIN LATERAL unnest(ARRAY['tenant:' || e.tenant, 'kind:' || e.kind, 'queue:' || e.queue, 'key:' || e.concurrency_key]) AS s(scope)
        WHERE s.scope IS NOT NULL
        GROUP BY s.scope
        ORDER BY s.scope
    ) AS e
    WHERE c.scope = e.scope
),
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts,
        outcome = CASE WHEN released.state = 'cancelled' THEN 'cancelled' ELSE 'released' END
    FROM released, n
    WHERE a.job_id = released.id AND a.claim = %(claim)s AND a.finished_at IS NULL
)
SELECT count(*) AS released FROM released
