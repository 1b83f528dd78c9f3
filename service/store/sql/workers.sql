-- name: deregister_worker
DELETE FROM workers WHERE id = :id

-- name: touch_worker
UPDATE workers SET last_seen_at = {{now}} WHERE id = :id
