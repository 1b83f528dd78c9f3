-- name: prior_item_states
-- The outcomes already stored for the items about to be written: an item re-run after it
-- failed (a retry past max_item_failures) moves from failed to its new state.
SELECT state, count(*) AS n FROM job_items
WHERE job_id = :job_id AND item_index IN (SELECT value FROM json_each(:indexes))
GROUP BY state

-- name: store_item
-- One item outcome, in the transaction of the fenced write that carries it; a retried item's
-- outcome is replaced.
INSERT INTO job_items (job_id, item_index, state, result, error, error_group, attempt, finished_at)
VALUES (:job_id, :item_index, :state, :result, :error, :error_group, :attempt, :now)
ON CONFLICT (job_id, item_index) DO UPDATE
SET state = excluded.state, result = excluded.result, error = excluded.error,
    error_group = excluded.error_group, attempt = excluded.attempt, finished_at = excluded.finished_at
