-- name: register_worker
-- A worker's row at start-up (its queues, kinds and slots); a restart under its id only
-- touches it.
INSERT INTO workers (id, host, pid, queues, kinds, concurrency, started_at, last_seen_at)
VALUES (:id, :host, :pid, :queues::jsonb, :kinds::jsonb, :concurrency,
        {{now}}, {{now}})
ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at

