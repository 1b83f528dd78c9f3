-- name: delete_limit
-- An operator's removal of a limit (the caller then refreshes the counters, under
-- LOCK_COUNTERS on PostgreSQL).
DELETE FROM limits WHERE scope = :scope RETURNING scope

-- name: set_limit
-- An operator's limit on a scope, new or replaced whole (the caller then refreshes the
-- counters it governs).
INSERT INTO limits (scope, concurrency, rate, per_seconds, weight, updated_at)
VALUES (:scope, :concurrency, :rate, :per_seconds, :weight, {{now}})
ON CONFLICT (scope) DO UPDATE
SET concurrency = excluded.concurrency, rate = excluded.rate, per_seconds = excluded.per_seconds,
    weight = excluded.weight, updated_at = excluded.updated_at
