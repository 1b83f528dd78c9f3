-- name: enqueue_jobs
-- A tenant's idempotency key that is already taken inserts nothing; the caller
-- then reads the existing job with READ_BY_IDEMPOTENCY_KEYS.
INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                  max_attempts_default, done, total, run_after, concurrency_key, idempotency_key,
                  created_at, updated_at)
VALUES (:id, :tenant, :queue, :kind, :payload, 'queued', :priority, 0, :max_attempts,
        :max_attempts_default, 0, :total, coalesce(:run_after, strftime('%Y-%m-%d %H:%M:%f', :now, :delay || ' seconds')),
        :concurrency_key, :idempotency_key, :now, :now)
ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING {{status_columns}}

-- name: read_by_idempotency_keys
-- The job already stored under a (tenant, idempotency key), if any.
SELECT {{status_columns}}
FROM jobs WHERE tenant = :tenant AND idempotency_key = :idempotency_key
