
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS ts
),
input AS (
    SELECT *
    FROM jsonb_to_recordset(%(batch)s::jsonb)
         AS i(job_id uuid, claim int, attempt int, owner text, result_id uuid, body text,
              done int, total int)
),
item_input AS (SELECT x.*
    FROM jsonb_to_recordset(%(items)s::jsonb)
         AS x(job_id uuid, item_index int, state text, result text, error text, error_group text)),
deltas AS (SELECT x.job_id,
           count(*) FILTER (WHERE x.state = 'ok') - count(p.state) FILTER (WHERE p.state = 'ok') AS ok,
           count(*) FILTER (WHERE x.state = 'failed') - count(p.state) FILTER (WHERE p.state = 'failed') AS failed
    FROM item_input AS x
    LEFT JOIN LATERAL (
        SELECT p.state FROM job_items AS p
        WHERE p.job_id = x.job_id AND p.item_index = x.item_index
        OFFSET 0
    ) AS p ON true
    GROUP BY x.job_id),
held AS (
    SELECT i.*, j.dependents_version,
           (%(recheck)s AND j.dependents_version <> 0
            AND j.dependents_version <> (SELECT s.dependents_version FROM jobs AS s WHERE s.id = i.job_id)) AS raced
    FROM input AS i
    CROSS JOIN LATERAL (
        SELECT j.claims, j.attempts, j.lease_owner, j.state, j.dependents_version
        FROM jobs AS j
        WHERE j.id = i.job_id
        FOR UPDATE
        OFFSET 0
    ) AS j
    WHERE j.claims = i.claim AND j.attempts = i.attempt AND j.lease_owner = i.owner AND j.state = 'running'
),
finished AS (
    UPDATE jobs AS j
    SET state = 'succeeded',
        result_id = i.result_id,
        total = coalesce(i.total, j.total),
        done = CASE WHEN coalesce(i.total, j.total) > 0 THEN coalesce(i.total, j.total)
                    ELSE coalesce(i.done, j.done) END,
        items_ok = j.items_ok + coalesce(d.ok, 0),
        items_failed = j.items_failed + coalesce(d.failed, 0),
        lease_expires_at = NULL,
        finished_at = n.ts,
        updated_at = n.ts
    FROM held AS i LEFT JOIN deltas AS d ON d.job_id = i.job_id, n
    WHERE j.id = i.job_id AND NOT i.raced
    RETURNING j.id, j.attempts, n.ts, i.claim, i.result_id, i.body, j.tenant, j.kind, j.queue, j.concurrency_key,
              j.dependents_version, CASE WHEN %(notify)s THEN pg_notify('jobq_job_changes', j.id::text) END AS notified
),freed AS (
    UPDATE scope_counters AS c
    SET running = c.running - e.jobs
    FROM (
        SELECT s.scope, count(*) AS jobs
        FROM finished AS e CROSS JOIN LATERAL unnest(ARRAY['tenant:' || e.tenant, 'kind:' || e.kind, 'queue:' || e.queue, 'key:' || e.concurrency_key]) AS s(scope)
        WHERE s.scope IS NOT NULL
        GROUP BY s.scope
        ORDER BY s.scope
    ) AS e
    WHERE c.scope = e.scope
),
met AS (
    SELECT e.child, count(*) AS met
    FROM finished AS f JOIN job_edges AS e ON e.parent = f.id
    WHERE f.dependents_version <> 0
    GROUP BY e.child
    ORDER BY e.child
),
freeing AS (SELECT r.child, r.met, c.on_parent_failure
FROM met AS r
CROSS JOIN LATERAL (
    SELECT c.state, c.parents_pending, c.on_parent_failure FROM jobs AS c WHERE c.id = r.child FOR UPDATE OFFSET 0
) AS c
WHERE c.state = 'queued' AND c.parents_pending > 0),
released AS (
    UPDATE jobs AS c
    SET parents_pending = c.parents_pending - r.met,
        run_after = CASE WHEN c.parents_pending = r.met THEN greatest(n.ts, coalesce(c.due_after_parents, n.ts))
                         ELSE c.run_after END,
        updated_at = n.ts
    FROM freeing AS r, n
    WHERE c.id = r.child
    RETURNING c.queue, c.parents_pending
),
woke AS (
    SELECT CASE WHEN %(notify)s THEN pg_notify('jobq_jobs', string_agg(DISTINCT queue, ',')) END AS woke
    FROM released WHERE parents_pending = 0 HAVING count(*) > 0
),
written AS (
    SELECT id, attempts, ts FROM finished
),
stored_items AS (INSERT INTO job_items AS i (job_id, item_index, state, result, error, error_group, attempt, finished_at)
    SELECT x.job_id, x.item_index, x.state, x.result::jsonb, x.error, x.error_group, w.attempts, w.ts
    FROM item_input AS x JOIN written AS w ON w.id = x.job_id
    ON CONFLICT (job_id, item_index) DO UPDATE
    SET state = excluded.state, result = excluded.result, error = excluded.error,
        error_group = excluded.error_group, attempt = excluded.attempt, finished_at = excluded.finished_at),
stored AS (
    INSERT INTO job_results (id, job_id, body, created_at)
    SELECT f.result_id, f.id, f.body::jsonb, n.ts FROM finished AS f, n
),
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'succeeded'
    FROM finished AS f, n
    WHERE a.job_id = f.id AND a.claim = f.claim AND a.outcome IS NULL
)
SELECT id, false AS raced, (SELECT count(*) FROM woke) AS woke FROM finished
UNION ALL
SELECT job_id, true, 0 FROM held WHERE raced
