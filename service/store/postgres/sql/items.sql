-- fragment: item_input
-- The item outcomes a heartbeat or a completion carries, and what they change in the job's
-- counts: an item re-run after it failed (a retry past max_item_failures) moves from failed
-- to its new state, so its old outcome is subtracted: job_items as it was before this
-- statement (one snapshot for the whole statement). Each result is JSON text (a null result
-- stays JSON null).
    SELECT x.*
    FROM jsonb_to_recordset(:items::jsonb)
         AS x(job_id uuid, item_index int, state text, result text, error text, error_group text)

-- fragment: item_deltas
-- Per job, how the item counts change: new outcomes counted, outcomes they overwrite (a
-- retried item) uncounted.
    SELECT x.job_id,
           count(*) FILTER (WHERE x.state = 'ok') - count(p.state) FILTER (WHERE p.state = 'ok') AS ok,
           count(*) FILTER (WHERE x.state = 'failed') - count(p.state) FILTER (WHERE p.state = 'failed') AS failed
    FROM item_input AS x
    LEFT JOIN LATERAL (
        -- one primary-key probe per item (OFFSET 0 keeps it a probe): joined as a set, a plan
        -- prepared while job_items was small would read all of it for every heartbeat after
        SELECT p.state FROM job_items AS p
        WHERE p.job_id = x.job_id AND p.item_index = x.item_index
        OFFSET 0
    ) AS p ON true
    GROUP BY x.job_id

-- fragment: store_items
-- Invariant 1: only the items of a job whose fenced update matched (``written``) are stored.
    INSERT INTO job_items AS i (job_id, item_index, state, result, error, error_group, attempt, finished_at)
    SELECT x.job_id, x.item_index, x.state, x.result::jsonb, x.error, x.error_group, w.attempts, w.ts
    FROM item_input AS x JOIN written AS w ON w.id = x.job_id
    ON CONFLICT (job_id, item_index) DO UPDATE
    SET state = excluded.state, result = excluded.result, error = excluded.error,
        error_group = excluded.error_group, attempt = excluded.attempt, finished_at = excluded.finished_at
