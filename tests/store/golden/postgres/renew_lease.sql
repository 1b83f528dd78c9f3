
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS ts
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
written AS (
    UPDATE jobs AS j
    SET lease_expires_at = n.ts + make_interval(secs => %(lease_seconds)s),
        done = coalesce(%(done)s, j.done),
        total = coalesce(%(total)s, j.total),
        checkpoint = coalesce(%(checkpoint)s::jsonb, j.checkpoint),
        items_ok = j.items_ok + coalesce(d.ok, 0),
        items_failed = j.items_failed + coalesce(d.failed, 0),
        updated_at = n.ts
    FROM n LEFT JOIN deltas AS d ON true
    WHERE j.id = %(job_id)s AND j.claims = %(claim)s AND j.attempts = %(attempt)s AND j.lease_owner = %(owner)s AND j.state = 'running'
    RETURNING j.id, j.attempts, n.ts, j.cancel_requested,
              CASE WHEN %(notify)s AND (%(done)s::int IS NOT NULL OR d.job_id IS NOT NULL)
                   THEN pg_notify('jobq_job_changes', j.id::text) END AS notified
),
stored AS (INSERT INTO job_items AS i (job_id, item_index, state, result, error, error_group, attempt, finished_at)
    SELECT x.job_id, x.item_index, x.state, x.result::jsonb, x.error, x.error_group, w.attempts, w.ts
    FROM item_input AS x JOIN written AS w ON w.id = x.job_id
    ON CONFLICT (job_id, item_index) DO UPDATE
    SET state = excluded.state, result = excluded.result, error = excluded.error,
        error_group = excluded.error_group, attempt = excluded.attempt, finished_at = excluded.finished_at)
SELECT cancel_requested, notified FROM written
