
UPDATE jobs
SET lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', :now, :lease_seconds || ' seconds'),
    done = coalesce(:done, done),
    total = coalesce(:total, total),
    checkpoint = coalesce(:checkpoint, checkpoint),
    items_ok = items_ok + :ok_delta,
    items_failed = items_failed + :failed_delta,
    updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner AND state = 'running'
RETURNING cancel_requested
