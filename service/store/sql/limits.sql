-- name: delete_limit
DELETE FROM limits WHERE scope = :scope RETURNING scope

-- name: set_limit
INSERT INTO limits (scope, concurrency, rate, per_seconds, weight, updated_at)
VALUES (:scope, :concurrency, :rate, :per_seconds, :weight, {{now}})
ON CONFLICT (scope) DO UPDATE
SET concurrency = excluded.concurrency, rate = excluded.rate, per_seconds = excluded.per_seconds,
    weight = excluded.weight, updated_at = excluded.updated_at
