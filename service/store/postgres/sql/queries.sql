-- fragment: job_filters
-- The optional filters of a job listing or search (the API's list, the console's search):
-- each is off while its parameter is NULL. The error is matched only where a status shows
-- one: a succeeded job keeps the error of an earlier attempt, which no page shows.
  AND (:tenant::text IS NULL OR tenant = :tenant)
  AND (:state::text IS NULL OR state = :state)
  AND (:kind::text IS NULL OR kind = :kind)
  AND (:queue::text IS NULL OR queue = :queue)
  AND (:created_after::timestamptz IS NULL OR created_at > :created_after::timestamptz)
  AND (:created_before::timestamptz IS NULL OR created_at < :created_before::timestamptz)
  AND (:idempotency_key::text IS NULL OR idempotency_key = :idempotency_key)
  AND (:concurrency_key::text IS NULL OR concurrency_key = :concurrency_key)
  AND (:workflow_id::uuid IS NULL OR workflow_id = :workflow_id::uuid)
  AND (:error_like::text IS NULL OR (state <> 'succeeded' AND error ILIKE :error_like ESCAPE '\'))

-- fragment: job_page(order)
-- A keyset page on the time-ordered id: older than :after_id (DESC, the next page), or newer
-- than :before_id (ASC, the previous page, nearest first; the store turns it round).
  AND (:after_id::uuid IS NULL OR id < :after_id::uuid)
  AND (:before_id::uuid IS NULL OR id > :before_id::uuid)
ORDER BY id {order}
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
-- Leases that ran out in the window: workers that died or stalled.
SELECT count(*) AS expiries
FROM job_attempts
WHERE finished_at >= {{now}} - make_interval(secs => :window)
  AND outcome = 'lease_expired'

-- name: duration_buckets
-- Run times of the jobs finished in the window,, as histogram buckets per kind.
SELECT kind,
       width_bucket(extract(epoch FROM finished_at - started_at)::float8, :bounds::float8[]) AS bucket,
       count(*) AS count
FROM jobs
WHERE finished_at >= {{now}} - make_interval(secs => :window)
  AND state IN ('succeeded', 'failed') AND started_at IS NOT NULL
GROUP BY kind, bucket

-- name: pickup_buckets
-- Waits from due to started of the attempts finished in the window, as histogram buckets per
-- kind.
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
    FROM jobs WHERE {{claimable(jobs)}} GROUP BY queue
    UNION ALL
    SELECT queue, count(*), 0, 0, NULL FROM jobs WHERE {{held(jobs)}} GROUP BY queue
    UNION ALL
    SELECT queue, 0, 0, count(*), NULL FROM jobs WHERE state = 'running' GROUP BY queue
) AS active
GROUP BY queue
ORDER BY queue

-- name: health_stats
-- For metrics, `jobq stats` and the console (FAILURE-MODES.md, bloat): the statistics
-- views only, never a table. Dead tuples come from the cumulative statistics, which lag
-- by a second or so. What holds back vacuum of jobq's tables (the xmin horizon):
-- * open transactions of other clients of this database ("idle in transaction" included),
--   the oldest by xact_start, with who holds it; a prepared transaction (two-phase commit)
--   has no backend and pins the horizon until it is committed or rolled back, so it counts
--   as open since it was prepared, held by its owner. Sessions of other databases of the
--   cluster are left out: they do not hold back vacuum of this database's tables.
-- * replication: the xmin of a replication slot, or the feedback of a standby with
--   hot_standby_feedback on (pg_stat_replication.backend_xmin), as an age in transactions
--   (0: none); a standby's queries pin the primary only through these.
-- Other roles' sessions show their xact_start and backend_xmin only to pg_read_all_stats
-- members. The real clock, not a pinned one: xact_start is real time.
WITH open AS (
    -- What it holds back: its snapshot's xmin, or its own xid once it wrote (greatest
    -- skips NULLs; both NULL: READ COMMITTED between statements, holding no row back).
    SELECT pid, usename::text AS usename, application_name, state, xact_start AS since,
           greatest(age(backend_xmin), age(backend_xid)) AS xmin_age
    FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND backend_type = 'client backend' AND xact_start IS NOT NULL
    UNION ALL
    SELECT NULL, owner::text, NULL, 'prepared', prepared, age(transaction)
    FROM pg_prepared_xacts
    WHERE database = current_database()
),
oldest AS (
    SELECT * FROM open ORDER BY since LIMIT 1
),
replication AS (
    SELECT age(xmin) AS xmin_age FROM pg_replication_slots WHERE xmin IS NOT NULL
    UNION ALL
    SELECT age(backend_xmin) FROM pg_stat_replication WHERE backend_xmin IS NOT NULL
)
SELECT (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = to_regclass('jobs')) AS jobs_dead_tuples,
       coalesce(greatest(0, extract(epoch FROM clock_timestamp() - o.since))::float8, 0)
           AS oldest_transaction_age_seconds,
       o.pid, o.usename, o.application_name, o.state, o.xmin_age,
       coalesce((SELECT max(xmin_age) FROM replication), 0) AS replication_xmin_age
FROM (SELECT) AS one
LEFT JOIN oldest AS o ON true

-- name: list_workers
-- The registered workers, or those seen within :within seconds (the live ones).
SELECT id, host, pid, queues, kinds, concurrency, started_at, last_seen_at
FROM workers
WHERE :within::float8 IS NULL
   OR last_seen_at > {{now}} - make_interval(secs => :within::float8)
ORDER BY started_at DESC, id

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
WHERE t.token_hash = :token_hash AND {{live_tenant_token(t)}}

-- name: read_statuses
-- Many status polls in one read (the API coalesces concurrent ones): each asked job
-- by primary key, only within the tenant given or the one its token names, so
-- another tenant's job, an unknown token and a revoked one all read as missing.
-- `ord` keeps the answers in the order asked.
SELECT q.ord, s.*
FROM unnest(:ids::uuid[], :tenants::text[], :token_hashes::text[])
     WITH ORDINALITY AS q(job_id, tenant, token_hash, ord)
LEFT JOIN api_tokens AS t ON t.token_hash = q.token_hash AND {{live_tenant_token(t)}}
JOIN LATERAL (
    SELECT {{status_columns}}
    FROM jobs
    WHERE id = q.job_id AND tenant = coalesce(t.tenant, q.tenant)
) AS s ON true

-- name: scope_usage
-- The limited scopes' counters (all, or the scopes named): the exact usage the claim judges
-- by.
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
        WHERE {{claimable(o)}} AND o.queue = :queue AND o.tenant = :tenant
          AND o.run_after <= {{now}}
          AND (o.priority > :priority
               OR (o.priority = :priority AND (o.run_after, o.id) < (:run_after::timestamptz, :job_id::uuid)))
       ) AS ahead
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT attempt, worker, started_at, finished_at, outcome, error FROM job_attempts
    WHERE job_id = :job_id ORDER BY claim DESC LIMIT 1
) AS a ON true

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

-- name: result_size
-- A result's address and its size in bytes of JSON text, read before it is streamed, so the
-- API can send Content-Length and then the body a chunk at a time (never whole in memory).
-- Scoped to the tenant like every read; the body is never sent here.
SELECT j.state, r.id AS result_id, octet_length(r.body::text) AS size
FROM jobs AS j LEFT JOIN job_results AS r ON r.id = j.result_id
WHERE j.id = :job_id AND (CAST(:tenant AS text) IS NULL OR j.tenant = :tenant)

-- name: result_chunk
-- Bytes [start, start + length) of a result's JSON text (1-based start, as substring counts):
-- a chunk the API streams. Bytes, not characters, so chunks add up to result_size exactly.
SELECT substring(convert_to(body::text, 'UTF8') FROM :start FOR :length) AS chunk
FROM job_results WHERE id = :result_id
