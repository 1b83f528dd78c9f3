-- fragment: job_filters
-- The optional filters of a job listing or search (the API's list, the console's search):
-- each is off while its parameter is NULL. The error is matched only where a status shows
-- one (a succeeded job keeps the error of an earlier attempt, which no page shows); LIKE is
-- case-insensitive for ASCII in SQLite, as ILIKE is on PostgreSQL.
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:state IS NULL OR state = :state)
  AND (:kind IS NULL OR kind = :kind)
  AND (:queue IS NULL OR queue = :queue)
  AND (:created_after IS NULL OR created_at > :created_after)
  AND (:created_before IS NULL OR created_at < :created_before)
  AND (:idempotency_key IS NULL OR idempotency_key = :idempotency_key)
  AND (:concurrency_key IS NULL OR concurrency_key = :concurrency_key)
  AND (:workflow_id IS NULL OR workflow_id = :workflow_id)
  AND (:error_like IS NULL OR (state <> 'succeeded' AND error LIKE :error_like ESCAPE '\'))

-- fragment: job_page(order)
-- A keyset page on the time-ordered id: older than :after_id (DESC, the next page), or newer
-- than :before_id (ASC, the previous page, nearest first; the store turns it round).
  AND (:after_id IS NULL OR id < :after_id)
  AND (:before_id IS NULL OR id > :before_id)
ORDER BY id {order}
LIMIT :limit

-- name: failure_groups
-- One query for the dead-letter view over a window of ix_jobs_finished_at.
SELECT kind, error_group, count(*) AS count, min(finished_at) AS first_seen,
       max(finished_at) AS last_seen, max(id) AS example_job_id
FROM jobs
WHERE finished_at >= :since
  AND state = 'failed'
  AND (:kind IS NULL OR kind = :kind)
  AND (:tenant IS NULL OR tenant = :tenant)
GROUP BY kind, error_group
ORDER BY count DESC, last_seen DESC

-- name: outcomes
-- Successes and failures per kind in the window.
SELECT kind,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'failed') AS failed
FROM jobs
WHERE finished_at >= strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :window || ' seconds')
  AND (:kind IS NULL OR kind = :kind)
GROUP BY kind
ORDER BY kind

-- name: lease_expiries
-- Leases that ran out in the window: workers that died or stalled.
SELECT count(*) AS expiries
FROM job_attempts
WHERE finished_at >= strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :window || ' seconds')
  AND outcome = 'lease_expired'

-- name: duration_buckets
-- width_bucket is registered on the connection (see SqliteStore.__init__) to match PostgreSQL's.
SELECT kind,
       width_bucket((julianday(finished_at) - julianday(started_at)) * 86400.0, :bounds) AS bucket,
       count(*) AS count
FROM jobs
WHERE finished_at >= strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :window || ' seconds')
  AND state IN ('succeeded', 'failed') AND started_at IS NOT NULL
GROUP BY kind, bucket

-- name: pickup_buckets
-- Waits from due to started of the attempts finished in the window, as histogram buckets per
-- kind.
SELECT j.kind,
       width_bucket((julianday(a.started_at) - julianday(a.due_at)) * 86400.0, :bounds) AS bucket,
       count(*) AS count
FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
WHERE a.finished_at >= strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :window || ' seconds')
GROUP BY j.kind, bucket

-- name: throughput
-- Jobs that ended per queue and time bucket of a window. A job that ended exactly "now"
-- goes in the last bucket, not in one past the window.
SELECT queue,
       min(:buckets - 1, CAST(((julianday(finished_at) - julianday(:now)) * 86400.0 + :window)
                              / :bucket_seconds AS INTEGER)) AS bucket,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'failed') AS failed
FROM jobs
WHERE finished_at >= strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :window || ' seconds')
  AND state IN ('succeeded', 'failed')
GROUP BY queue, bucket
ORDER BY queue, bucket

-- name: queue_stats
-- One arm per partial index, as on PostgreSQL (one scan for both states would read the table).
SELECT queue, sum(queued) AS queued, sum(due) AS due, sum(running) AS running,
       (julianday(:now) - julianday(min(oldest_due))) * 86400.0 AS oldest_queued_age_seconds
FROM (
    SELECT queue, count(*) AS queued, count(*) FILTER (WHERE run_after <= :now) AS due, 0 AS running,
           min(run_after) FILTER (WHERE run_after <= :now) AS oldest_due
    FROM jobs WHERE state = 'queued' AND parents_pending = 0 GROUP BY queue
    UNION ALL
    SELECT queue, count(*), 0, 0, NULL FROM jobs WHERE state = 'queued' AND parents_pending > 0 GROUP BY queue
    UNION ALL
    SELECT queue, 0, 0, count(*), NULL FROM jobs WHERE state = 'running' GROUP BY queue
)
GROUP BY queue
ORDER BY queue

-- name: list_workers
-- The registered workers, or those seen within :within seconds (the live ones).
SELECT id, host, pid, queues, kinds, concurrency, started_at, last_seen_at
FROM workers
WHERE :within IS NULL
   OR last_seen_at > strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :within || ' seconds')
ORDER BY started_at DESC, id

-- name: scope_usage
-- The limited scopes' counters (all, or the scopes named): the exact usage the claim judges
-- by.
SELECT scope, running, concurrency, rate, per_seconds, window_start, window_starts FROM scope_counters
WHERE :scopes IS NULL OR scope IN (SELECT value FROM json_each(:scopes))
ORDER BY scope

-- name: explain_facts
-- -- explain_facts (see the PostgreSQL store's EXPLAIN_FACTS) --
SELECT a.attempt, a.worker, a.started_at AS attempt_started_at, a.finished_at AS attempt_finished_at,
       a.outcome, a.error AS attempt_error,
       EXISTS (SELECT 1 FROM limits WHERE scope = 'tenant:*'
               AND (concurrency IS NOT NULL OR rate IS NOT NULL)) AS every_tenant_limited,
       (SELECT count(*) FROM jobs AS o
        WHERE o.state = 'queued' AND o.parents_pending = 0 AND o.queue = :queue AND o.tenant = :tenant AND o.run_after <= :now
          AND (o.priority > :priority
               OR (o.priority = :priority AND (o.run_after < :run_after
                                              OR (o.run_after = :run_after AND o.id < :job_id))))
       ) AS ahead
FROM (SELECT 1) AS one
LEFT JOIN (
    SELECT attempt, worker, started_at, finished_at, outcome, error FROM job_attempts
    WHERE job_id = :job_id ORDER BY claim DESC LIMIT 1
) AS a ON 1

-- name: job_exists
-- A page of a job's item outcomes in item order (keyset on the primary key), readable
-- while the job runs; JOB_EXISTS tells a job without outcomes from no such job.
SELECT 1 AS found FROM jobs WHERE id = :job_id AND (:tenant IS NULL OR tenant = :tenant)

-- name: list_items
-- A job's item outcomes, a page at a time, in item order (all, or one state).
SELECT item_index, state, result, error, attempt, finished_at
FROM job_items
WHERE job_id = :job_id AND item_index > :after_index AND (:state IS NULL OR state = :state)
ORDER BY item_index
LIMIT :limit

-- name: list_failed_items
-- The failed items only, through the partial index ix_job_items_failed: SQLite uses a partial
-- index only for a predicate written out as the index's, so not for the parameter above.
SELECT item_index, state, result, error, attempt, finished_at
FROM job_items
WHERE job_id = :job_id AND item_index > :after_index AND state = 'failed'
ORDER BY item_index
LIMIT :limit

-- name: result_size
-- A result's address and its size in bytes of JSON text, read before it is streamed, so the
-- API can send Content-Length and then the body a chunk at a time (never whole in memory).
-- Scoped to the tenant like every read; the body is never sent here.
SELECT j.state, r.id AS result_id, length(CAST(r.body AS BLOB)) AS size
FROM jobs AS j LEFT JOIN job_results AS r ON r.id = j.result_id
WHERE j.id = :job_id AND (:tenant IS NULL OR j.tenant = :tenant)

-- name: result_chunk
-- Bytes [start, start + length) of a result's JSON text (1-based start, as substr counts on a
-- blob): a chunk the API streams, adding up to result_size exactly.
SELECT substr(CAST(body AS BLOB), :start, :length) AS chunk
FROM job_results WHERE id = :result_id
