-- name: enqueue_jobs
-- Many jobs in one statement: the batch is one jsonb parameter, so psycopg dumps
-- one string (not twelve arrays element by element) and the plan does not depend
-- on the batch's length. A tenant's idempotency key that is already taken inserts
-- nothing: the existing job is read back by READ_BY_IDEMPOTENCY_KEYS. The caller
-- made the ids (time-ordered, in batch order), so one row comes back whatever the
-- batch's size: the database's clock, how many rows went in, the ids that went in
-- when the batch has keys (``keyed``; without keys every row goes in or none),
-- and the run_after of the jobs not due at once. Everything else in a new job's
-- status is what was inserted. The wake-up for idle workers rides in the same
-- statement (one round trip, one commit): one JOBS_QUEUED notification per
-- statement, never per row, delivered at commit; none when nothing was inserted.
-- The API's submit passes its caller's token_hash: the jobs then go to the token's
-- tenant, looked up here (the unique index on the hash) and in force at this
-- statement's snapshot, so a revoked token inserts nothing from the revoke's commit
-- on; token_tenant in the answer is NULL for an unknown, revoked or admin token.
-- Without a token_hash (the library, the CLI) each job's own tenant is taken.
WITH n AS (
    SELECT {{now}} AS ts
),
token AS (
    SELECT tenant FROM api_tokens
    WHERE token_hash = :token_hash AND {{live_tenant_token(api_tokens)}}
),
inserted AS (
INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                  max_attempts_default, done, total, run_after, concurrency_key, idempotency_key,
                  created_at, updated_at)
SELECT i.id, coalesce(t.tenant, i.tenant), i.queue, i.kind, i.payload, 'queued', i.priority, 0, i.max_attempts,
       i.max_attempts_default, 0, i.total, coalesce(i.run_after, n.ts + make_interval(secs => i.delay)),
       i.concurrency_key, i.idempotency_key, n.ts, n.ts
FROM jsonb_to_recordset(:batch::jsonb)
     AS i(id uuid, tenant text, queue text, kind text, payload jsonb, priority int, max_attempts int,
          max_attempts_default boolean, delay float8, run_after timestamptz, total int, concurrency_key text, idempotency_key text)
     CROSS JOIN n
     LEFT JOIN token AS t ON true
WHERE :token_hash::text IS NULL OR t.tenant IS NOT NULL
ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, tenant, run_after, created_at
),{{tenant_counters(inserted)}}
SELECT (SELECT ts FROM n) AS created_at,
       (SELECT tenant FROM token) AS token_tenant,
       count(*) AS inserted,
       CASE WHEN :keyed THEN array_agg(id) END AS ids,
       array_agg(id) FILTER (WHERE run_after <> created_at) AS later_ids,
       array_agg(run_after) FILTER (WHERE run_after <> created_at) AS later_run_after,
       CASE WHEN :notify AND count(*) > 0 THEN pg_notify('jobq_jobs', :wake_queues) END AS woke
FROM inserted

-- name: copy_batch_clock
-- The first statement of a copied batch's transaction: the clock its rows take (now()
-- is the transaction's start, as in ENQUEUE_JOBS), the batch's tenants' scope counters
-- (as ENQUEUE_JOBS makes them), and the wake-up, which PostgreSQL delivers at commit,
-- once the rows are there.
WITH n AS (
    SELECT {{now}} AS ts
),
added AS (
    SELECT DISTINCT unnest(:tenants::text[]) AS tenant
),{{tenant_counters(added)}}
SELECT (SELECT ts FROM n) AS created_at,
       CASE WHEN :notify THEN pg_notify('jobq_jobs', :wake_queues) END AS woke

-- name: read_by_idempotency_keys
-- The jobs already stored under the batch's (tenant, idempotency key) pairs.
SELECT {{status_columns}}
FROM jobs j
WHERE (j.tenant, j.idempotency_key) IN (
    SELECT * FROM unnest(:tenants::text[], :keys::text[])
)
