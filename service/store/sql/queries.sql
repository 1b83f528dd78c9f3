-- name: active_counts
-- Jobs per queue, kind and active state, for /metrics: one arm per partial index, as
-- QUEUE_STATS (ix_jobs_claimable, ix_jobs_held, ix_jobs_running), so a scrape never reads the
-- history. Jobs waiting for parents count as queued.
SELECT queue, kind, state, CAST(sum(count) AS bigint) AS count FROM (
    SELECT queue, kind, 'queued' AS state, count(*) AS count FROM jobs
    WHERE {{claimable(jobs)}} GROUP BY queue, kind
    UNION ALL
    SELECT queue, kind, 'queued' AS state, count(*) AS count FROM jobs
    WHERE {{held(jobs)}} GROUP BY queue, kind
    UNION ALL
    SELECT queue, kind, 'running' AS state, count(*) AS count FROM jobs WHERE state = 'running' GROUP BY queue, kind
) AS active
GROUP BY queue, kind, state
ORDER BY queue, kind, state

-- name: admin_token
-- The console's login and every console request: a live operator's token, or nothing.
SELECT id, tenant, name, created_at, revoked_at, admin, read_only FROM api_tokens
WHERE token_hash = :token_hash AND {{live_admin_token(api_tokens)}}

-- name: job_attempts
-- A job's attempts, oldest first, through uq_job_attempts_job_id_claim.
SELECT attempt, claim, worker, due_at, started_at, finished_at, outcome, error
FROM job_attempts
WHERE job_id = :job_id
ORDER BY claim

-- name: tenant_for_token
-- An admin token is no tenant's: /v1 refuses it like an unknown one.
SELECT tenant FROM api_tokens WHERE token_hash = :token_hash AND {{live_tenant_token(api_tokens)}}

-- name: running_jobs
-- What the fleet runs now, through the partial index ix_jobs_running: bounded by the slots.
SELECT {{status_columns}}
FROM jobs
WHERE state = 'running'
ORDER BY lease_owner, id
LIMIT :limit

-- fragment: status_columns
-- The columns of a job's status, and whether its lease has run out: every read of a status selects these.
    id, tenant, queue, kind, state, priority, attempts, max_attempts, done, total, error,
    cancel_requested, concurrency_key, idempotency_key, lease_owner, lease_expires_at,
    run_after, created_at, started_at, finished_at, updated_at, result_id, items_ok, items_failed,
    parents_total, parents_pending, workflow_id, (state = 'running' AND lease_expires_at < {{now}}) AS stale

-- name: running_in_scope
-- Running jobs in one scope that the caller may see (a tenant sees only its own ids).
SELECT id FROM jobs
WHERE state = 'running' AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
  AND :scope IN ({{job_scopes(jobs)}})
ORDER BY id
LIMIT :limit

-- name: get_result
-- The result body is read only here and in result_chunk, by its own request, never by a status poll.
SELECT j.state, r.body
FROM jobs AS j LEFT JOIN job_results AS r ON r.id = j.result_id
WHERE j.id = :job_id AND (CAST(:tenant AS text) IS NULL OR j.tenant = :tenant)

-- name: list_limits
-- A tenant's own scopes: its tenant:NAME limit and the tenant:* default that applies to it.
SELECT scope, concurrency, rate, per_seconds, weight FROM limits
WHERE CAST(:tenant AS text) IS NULL OR scope IN ('tenant:' || :tenant, 'tenant:*')
ORDER BY scope

-- name: list_tokens
-- The API tokens, a tenant's or all; never a token's hash.
SELECT id, tenant, name, created_at, revoked_at, admin, read_only FROM api_tokens
WHERE CAST(:tenant AS text) IS NULL OR tenant = :tenant
ORDER BY created_at, id

-- name: get_payload
-- The payload alone, by primary key: only a submit that repeats an Idempotency-Key reads it.
SELECT payload FROM jobs
WHERE id = :job_id AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)

-- name: get_job
-- A job's status by id; another tenant's job reads as missing.
SELECT {{status_columns}}
FROM jobs
WHERE id = :job_id AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)

-- name: list_jobs
-- Keyset pagination on the time-ordered id through ix_jobs_tenant_id.
SELECT {{status_columns}}
FROM jobs
WHERE tenant = :tenant
{{job_filters}}
{{job_page(DESC)}}

-- name: list_jobs_newer
-- The page before (newer than :before_id) of list_jobs, nearest first, up ix_jobs_tenant_id.
SELECT {{status_columns}}
FROM jobs
WHERE tenant = :tenant
{{job_filters}}
{{job_page(ASC)}}

-- name: count_jobs
-- How many jobs list_jobs's filters match: a count that reads at most :limit entries of the
-- listing's index, newest first (as the page walks it). When the walk ends before that the
-- count is exact; else it is "at least n" among the newest :limit. An exact count of a
-- broad or rare filter would read every job of the history, whatever the cap on matches.
SELECT count(*) FILTER (WHERE true {{job_filters}}) AS n, count(*) AS read
FROM (
    SELECT {{search_columns}} FROM jobs WHERE tenant = :tenant ORDER BY id DESC LIMIT :limit
) AS walked

-- name: list_all_jobs
-- The operators' list, every tenant: the same keyset walk down the primary key. A statement
-- of its own, not "tenant IS NULL OR": a generic plan of that could not use ix_jobs_tenant_id.
SELECT {{status_columns}}
FROM jobs
WHERE true
{{job_filters}}
{{job_page(DESC)}}

-- name: list_all_jobs_newer
-- The page before (newer than :before_id) of list_all_jobs, up the primary key.
SELECT {{status_columns}}
FROM jobs
WHERE true
{{job_filters}}
{{job_page(ASC)}}

-- name: count_all_jobs
-- How many jobs list_all_jobs's filters match, reading at most :limit of the primary key (see count_jobs).
SELECT count(*) FILTER (WHERE true {{job_filters}}) AS n, count(*) AS read
FROM (
    SELECT {{search_columns}} FROM jobs WHERE true ORDER BY id DESC LIMIT :limit
) AS walked

-- name: list_errored_jobs
-- A search by error text walks ix_jobs_errored_id (jobs that show an error) newest first:
-- a substring match uses no B-tree, so it is tried on the errored jobs only, never on the
-- whole history (migration 0014).
SELECT {{status_columns}}
FROM jobs
WHERE error IS NOT NULL AND state <> 'succeeded'
{{job_filters}}
{{job_page(DESC)}}

-- name: list_errored_jobs_newer
-- The page before (newer than :before_id) of list_errored_jobs.
SELECT {{status_columns}}
FROM jobs
WHERE error IS NOT NULL AND state <> 'succeeded'
{{job_filters}}
{{job_page(ASC)}}

-- name: count_errored_jobs
-- How many errored jobs match, reading at most :limit of ix_jobs_errored_id (see count_jobs).
SELECT count(*) FILTER (WHERE true {{job_filters}}) AS n, count(*) AS read
FROM (
    SELECT {{search_columns}} FROM jobs WHERE error IS NOT NULL AND state <> 'succeeded' ORDER BY id DESC LIMIT :limit
) AS walked

-- name: list_jobs_by_idempotency_key
-- The jobs of one idempotency key (one per tenant at most), through ix_jobs_idempotency_key_id:
-- uq_jobs_tenant_idempotency_key leads with the tenant, and the console searches every tenant.
SELECT {{status_columns}}
FROM jobs
WHERE idempotency_key = :idempotency_key
{{job_filters}}
{{job_page(DESC)}}

-- name: list_jobs_by_idempotency_key_newer
-- The page before (newer than :before_id) of list_jobs_by_idempotency_key.
SELECT {{status_columns}}
FROM jobs
WHERE idempotency_key = :idempotency_key
{{job_filters}}
{{job_page(ASC)}}

-- name: count_jobs_by_idempotency_key
-- How many jobs of the idempotency key match, reading at most :limit of its index (see count_jobs).
SELECT count(*) FILTER (WHERE true {{job_filters}}) AS n, count(*) AS read
FROM (
    SELECT {{search_columns}} FROM jobs WHERE idempotency_key = :idempotency_key ORDER BY id DESC LIMIT :limit
) AS walked

-- name: list_jobs_by_concurrency_key
-- The jobs of one concurrency key, every state, newest first, through ix_jobs_concurrency_key_id
-- (ix_jobs_running holds only the running ones).
SELECT {{status_columns}}
FROM jobs
WHERE concurrency_key = :concurrency_key
{{job_filters}}
{{job_page(DESC)}}

-- name: list_jobs_by_concurrency_key_newer
-- The page before (newer than :before_id) of list_jobs_by_concurrency_key.
SELECT {{status_columns}}
FROM jobs
WHERE concurrency_key = :concurrency_key
{{job_filters}}
{{job_page(ASC)}}

-- name: count_jobs_by_concurrency_key
-- How many jobs of the concurrency key match, reading at most :limit of its index (see count_jobs).
SELECT count(*) FILTER (WHERE true {{job_filters}}) AS n, count(*) AS read
FROM (
    SELECT {{search_columns}} FROM jobs WHERE concurrency_key = :concurrency_key ORDER BY id DESC LIMIT :limit
) AS walked

-- name: list_jobs_by_workflow
-- The jobs of one workflow, every state, newest first, through ix_jobs_workflow_id_id (migration
-- 0016): the console's link from a job's page to its whole workflow.
SELECT {{status_columns}}
FROM jobs
WHERE workflow_id = :workflow_id
{{job_filters}}
{{job_page(DESC)}}

-- name: list_jobs_by_workflow_newer
-- The page before (newer than :before_id) of list_jobs_by_workflow.
SELECT {{status_columns}}
FROM jobs
WHERE workflow_id = :workflow_id
{{job_filters}}
{{job_page(ASC)}}

-- name: count_jobs_by_workflow
-- How many jobs of the workflow match, reading at most :limit of its index (see count_jobs).
SELECT count(*) FILTER (WHERE true {{job_filters}}) AS n, count(*) AS read
FROM (
    SELECT {{search_columns}} FROM jobs WHERE workflow_id = :workflow_id ORDER BY id DESC LIMIT :limit
) AS walked

-- fragment: search_columns
-- What job_filters reads of a row: a count walks only these.
id, tenant, state, kind, queue, created_at, idempotency_key, concurrency_key, error, workflow_id
