-- fragment: status_columns
-- The columns of a job's status, and whether its lease has run out: every read of a status selects these.
    id, tenant, queue, kind, state, priority, attempts, max_attempts, done, total, error,
    cancel_requested, concurrency_key, idempotency_key, lease_owner, lease_expires_at,
    run_after, created_at, started_at, finished_at, updated_at, result_id, items_ok, items_failed,
    (state = 'running' AND lease_expires_at < {{now}}) AS stale

-- name: get_job
SELECT {{status_columns}}
FROM jobs
WHERE id = :job_id AND (:tenant::text IS NULL OR tenant = :tenant)

-- name: get_result
-- The result body is read only here, by its own request, never by a status poll.
SELECT j.state, r.body
FROM jobs AS j LEFT JOIN job_results AS r ON r.id = j.result_id
WHERE j.id = :job_id AND (:tenant::text IS NULL OR j.tenant = :tenant)

-- name: get_payload
-- The payload alone, by primary key: only a submit that repeats an Idempotency-Key reads it.
SELECT payload FROM jobs
WHERE id = :job_id AND (:tenant::text IS NULL OR tenant = :tenant)

-- fragment: list_filters
  AND (:state::text IS NULL OR state = :state)
  AND (:kind::text IS NULL OR kind = :kind)
  AND (:queue::text IS NULL OR queue = :queue)
  AND (:created_after::timestamptz IS NULL OR created_at > :created_after::timestamptz)
  AND (:after_id::uuid IS NULL OR id < :after_id::uuid)
ORDER BY id DESC
LIMIT :limit

-- name: list_jobs
-- Keyset pagination on the time-ordered id through ix_jobs_tenant_id.
SELECT {{status_columns}}
FROM jobs
WHERE tenant = :tenant
{{list_filters}}

-- name: list_all_jobs
-- The operators' list, every tenant: the same keyset walk down the primary key. A statement
-- of its own, not "tenant IS NULL OR": a generic plan of that could not use ix_jobs_tenant_id.
SELECT {{status_columns}}
FROM jobs
WHERE true
{{list_filters}}

-- name: job_attempts
-- A job's attempts, oldest first, through uq_job_attempts_job_id_claim.
SELECT attempt, claim, worker, due_at, started_at, finished_at, outcome, error
FROM job_attempts
WHERE job_id = :job_id
ORDER BY claim

-- name: running_jobs
-- What the fleet runs now, through the partial index ix_jobs_running: bounded by the slots.
SELECT {{status_columns}}
FROM jobs
WHERE state = 'running'
ORDER BY lease_owner, id
LIMIT :limit

-- name: failure_groups
-- One query for the dead-letter view: failed jobs in a window of ix_jobs_finished_at,
-- grouped by kind and the normalised error prefix written at failure time.
SELECT kind, error_group, count(*) AS count, min(finished_at) AS first_seen,
       max(finished_at) AS last_seen, max(id::text)::uuid AS example_job_id
FROM jobs
WHERE finished_at >= :since::timestamptz
  AND state = 'failed'
  AND (:kind::text IS NULL OR kind = :kind)
  AND (:tenant::text IS NULL OR tenant = :tenant)
GROUP BY kind, error_group
ORDER BY count DESC, last_seen DESC

-- name: outcomes
-- Final outcomes per kind within a window, for failure ratios and alerts.
SELECT kind,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'failed') AS failed
FROM jobs
WHERE finished_at >= {{now}} - make_interval(secs => :window)
  AND (:kind::text IS NULL OR kind = :kind)
GROUP BY kind
ORDER BY kind

-- name: lease_expiries
SELECT count(*) AS expiries
FROM job_attempts
WHERE finished_at >= {{now}} - make_interval(secs => :window)
  AND outcome = 'lease_expired'

-- name: duration_buckets
SELECT kind,
       width_bucket(extract(epoch FROM finished_at - started_at)::float8, :bounds::float8[]) AS bucket,
       count(*) AS count
FROM jobs
WHERE finished_at >= {{now}} - make_interval(secs => :window)
  AND state IN ('succeeded', 'failed') AND started_at IS NOT NULL
GROUP BY kind, bucket

-- name: pickup_buckets
SELECT j.kind,
       width_bucket(extract(epoch FROM a.started_at - a.due_at)::float8, :bounds::float8[]) AS bucket,
       count(*) AS count
FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
WHERE a.finished_at >= {{now}} - make_interval(secs => :window)
GROUP BY j.kind, bucket

-- name: throughput
-- Jobs that ended per queue and time bucket of a window (ix_jobs_finished_at). A job
-- that ended exactly "now" goes in the last bucket, not in one past the window.
SELECT queue,
       least(:buckets - 1, floor(extract(epoch FROM finished_at - ({{now}}
             - make_interval(secs => :window))) / :bucket_seconds))::int AS bucket,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'failed') AS failed
FROM jobs
WHERE finished_at >= {{now}} - make_interval(secs => :window)
  AND state IN ('succeeded', 'failed')
GROUP BY queue, bucket
ORDER BY queue, bucket

-- name: queue_stats
-- Active rows only, never history: one arm per partial index (ix_jobs_claimable holds the
-- queued rows, ix_jobs_running the running ones). "state IN ('queued', 'running')" in one
-- scan would match neither index's predicate, and the planner reads the whole table.
SELECT queue, sum(queued)::int AS queued, sum(due)::int AS due, sum(running)::int AS running,
       extract(epoch FROM {{now}} - min(oldest_due))::float8 AS oldest_queued_age_seconds
FROM (
    SELECT queue, count(*) AS queued,
           count(*) FILTER (WHERE run_after <= {{now}}) AS due,
           0 AS running,
           min(run_after) FILTER (WHERE run_after <= {{now}}) AS oldest_due
    FROM jobs WHERE state = 'queued' GROUP BY queue
    UNION ALL
    SELECT queue, 0, 0, count(*), NULL FROM jobs WHERE state = 'running' GROUP BY queue
) AS active
GROUP BY queue
ORDER BY queue

-- name: active_counts
-- Jobs per queue, kind and active state, for /metrics: one arm per partial index, as
-- QUEUE_STATS (ix_jobs_claimable, ix_jobs_running), so a scrape never reads the history.
SELECT queue, kind, 'queued' AS state, count(*) AS count FROM jobs WHERE state = 'queued' GROUP BY queue, kind
UNION ALL
SELECT queue, kind, 'running' AS state, count(*) AS count FROM jobs WHERE state = 'running' GROUP BY queue, kind
ORDER BY queue, kind, state

-- name: health_stats
-- For metrics (FAILURE-MODES.md, bloat): the statistics views only, never a table.
-- Dead tuples come from the cumulative statistics, which lag by a second or so.
-- The oldest transaction: any other client of this database holding one open
-- ("idle in transaction" included), which holds back what vacuum may remove.
-- Other roles' sessions show their xact_start only to pg_read_all_stats members.
-- The real clock, not a pinned one: xact_start is real time.
SELECT (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = to_regclass('jobs')) AS jobs_dead_tuples,
       coalesce((SELECT greatest(0, extract(epoch FROM clock_timestamp() - min(xact_start)))::float8
                 FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND backend_type = 'client backend' AND xact_start IS NOT NULL), 0) AS oldest_transaction_age_seconds

-- name: list_workers
SELECT id, host, pid, queues, kinds, concurrency, started_at, last_seen_at
FROM workers
WHERE :within::float8 IS NULL
   OR last_seen_at > {{now}} - make_interval(secs => :within::float8)
ORDER BY started_at DESC, id

-- name: tenant_for_token
-- An admin token is no tenant's: /v1 refuses it like an unknown one.
SELECT tenant FROM api_tokens WHERE token_hash = :token_hash AND revoked_at IS NULL AND NOT admin

-- name: admin_token
-- The console's login and every console request: a live operator's token, or nothing.
SELECT id, tenant, name, created_at, revoked_at, admin FROM api_tokens
WHERE token_hash = :token_hash AND revoked_at IS NULL AND admin

-- name: get_job_for_token
-- A status poll is one query, not a token lookup and then a read: the token
-- (unique index on its hash) and the job (primary key) together. No row: the
-- token is unknown or revoked; a row whose job columns are NULL: no such job for
-- that tenant.
SELECT t.tenant AS token_tenant, s.*
FROM api_tokens AS t
LEFT JOIN LATERAL (
    SELECT {{status_columns}}
    FROM jobs
    WHERE id = :job_id AND tenant = t.tenant
) AS s ON true
WHERE t.token_hash = :token_hash AND t.revoked_at IS NULL AND NOT t.admin

-- name: read_statuses
-- Many status polls in one read (the API coalesces concurrent ones): each asked job
-- by primary key, only within the tenant given or the one its token names, so
-- another tenant's job, an unknown token and a revoked one all read as missing.
-- `ord` keeps the answers in the order asked.
SELECT q.ord, s.*
FROM unnest(:ids::uuid[], :tenants::text[], :token_hashes::text[])
     WITH ORDINALITY AS q(job_id, tenant, token_hash, ord)
LEFT JOIN api_tokens AS t ON t.token_hash = q.token_hash AND t.revoked_at IS NULL AND NOT t.admin
JOIN LATERAL (
    SELECT {{status_columns}}
    FROM jobs
    WHERE id = q.job_id AND tenant = coalesce(t.tenant, q.tenant)
) AS s ON true

-- name: list_tokens
SELECT id, tenant, name, created_at, revoked_at, admin FROM api_tokens
WHERE :tenant::text IS NULL OR tenant = :tenant
ORDER BY created_at, id

-- name: list_limits
-- A tenant's own scopes: its tenant:NAME limit and the tenant:* default that applies to it.
SELECT scope, concurrency, rate, per_seconds, weight FROM limits
WHERE :tenant::text IS NULL OR scope IN ('tenant:' || :tenant, 'tenant:*')
ORDER BY scope

-- name: scope_usage
SELECT scope, running, concurrency, rate, per_seconds, window_start, window_starts FROM scope_counters
WHERE :scopes::text[] IS NULL OR scope = ANY(:scopes::text[])
ORDER BY scope

-- name: explain_facts
-- What explain needs besides the status, in one read: the clock, the last attempt, whether
-- tenant:* limits every tenant, and how many due jobs of the tenant's line (its queue, in
-- claim order) are ahead of the job (ix_jobs_claimable, one tenant's slice).
SELECT {{now}} AS now,
       a.attempt, a.worker, a.started_at AS attempt_started_at, a.finished_at AS attempt_finished_at,
       a.outcome, a.error AS attempt_error,
       EXISTS (SELECT 1 FROM limits WHERE scope = 'tenant:*'
               AND (concurrency IS NOT NULL OR rate IS NOT NULL)) AS every_tenant_limited,
       (SELECT count(*) FROM jobs AS o
        WHERE o.state = 'queued' AND o.queue = :queue AND o.tenant = :tenant
          AND o.run_after <= {{now}}
          AND (o.priority > :priority
               OR (o.priority = :priority AND (o.run_after, o.id) < (:run_after::timestamptz, :job_id::uuid)))
       ) AS ahead
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT attempt, worker, started_at, finished_at, outcome, error FROM job_attempts
    WHERE job_id = :job_id ORDER BY claim DESC LIMIT 1
) AS a ON true

-- name: running_in_scope
-- Running jobs in one scope that the caller may see (a tenant sees only its own ids).
SELECT id FROM jobs
WHERE state = 'running' AND (:tenant::text IS NULL OR tenant = :tenant)
  AND :scope IN ('tenant:' || tenant, 'kind:' || kind, 'queue:' || queue, 'key:' || concurrency_key)
ORDER BY id
LIMIT :limit

-- name: list_items
-- One page of a job's item outcomes in item order, keyset on item_index through the
-- primary key (job_id, item_index); readable while the job runs. The job row is read in
-- the same query, tenant-scoped: no row at all means no such job (or another tenant's),
-- a row with a NULL item_index means a job without (more) outcomes.
SELECT i.item_index, i.state, i.result, i.error, i.attempt, i.finished_at
FROM jobs AS j
LEFT JOIN LATERAL (
    SELECT item_index, state, result, error, attempt, finished_at
    FROM job_items
    WHERE job_id = j.id AND item_index > :after_index AND (:state::text IS NULL OR state = :state)
    ORDER BY item_index
    LIMIT :limit
) AS i ON true
WHERE j.id = :job_id AND (:tenant::text IS NULL OR j.tenant = :tenant)
ORDER BY i.item_index

-- name: list_failed_items
-- The failed items only, through the partial index ix_job_items_failed (a predicate
-- written out, not a parameter, so that the planner can use it in a generic plan).
SELECT i.item_index, i.state, i.result, i.error, i.attempt, i.finished_at
FROM jobs AS j
LEFT JOIN LATERAL (
    SELECT item_index, state, result, error, attempt, finished_at
    FROM job_items
    WHERE job_id = j.id AND item_index > :after_index AND state = 'failed'
    ORDER BY item_index
    LIMIT :limit
) AS i ON true
WHERE j.id = :job_id AND (:tenant::text IS NULL OR j.tenant = :tenant)
ORDER BY i.item_index
