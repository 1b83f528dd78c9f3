-- name: deregister_worker
-- A worker that stops cleanly leaves the list at once, not after the liveness window.
DELETE FROM workers WHERE id = :id

-- name: touch_worker
-- A live worker's heartbeat in the workers table: the last time it was seen.
UPDATE workers SET last_seen_at = {{now}} WHERE id = :id
