-- name: clock
-- The database's clock (or the pinned test instant): the scheduler's "now" for a pass.
SELECT {{now}} AS now

-- name: save_schedule
-- Insert or redefine; a redefinition keeps paused, the last run, and next_run_at unless
-- the cron expression or the time zone changed (a worker restart must not re-fire a tick).
INSERT INTO schedules (name, cron, timezone, kind, payload, queue, tenant, catch_up, source,
                       next_run_at, created_at, updated_at)
VALUES (:name, :cron, :timezone, :kind, :payload::jsonb, :queue, :tenant,
        :catch_up, :source, :next_run_at, {{now}}, {{now}})
ON CONFLICT (name) DO UPDATE SET
    next_run_at = CASE WHEN schedules.cron <> excluded.cron OR schedules.timezone <> excluded.timezone
                       THEN excluded.next_run_at ELSE schedules.next_run_at END,
    cron = excluded.cron, timezone = excluded.timezone, kind = excluded.kind,
    payload = excluded.payload, queue = excluded.queue, tenant = excluded.tenant,
    catch_up = excluded.catch_up, source = excluded.source, updated_at = excluded.updated_at
RETURNING *

-- name: due_schedules
-- The leader's scheduler's read (service.maintenance.scheduler), when a schedule is due:
-- ix_schedules_due, due rows only, and following, the earliest next run not yet due (the
-- index's first entry past now), when the scheduler looks again.
SELECT n.now, n.following, s.*
FROM (SELECT c.now, (SELECT min(next_run_at) FROM schedules WHERE NOT paused AND next_run_at > c.now) AS following
      FROM (SELECT {{now}} AS now) AS c) AS n
LEFT JOIN LATERAL (
    SELECT * FROM schedules
    WHERE NOT paused AND next_run_at <= n.now
    ORDER BY next_run_at
    LIMIT :limit
) AS s ON true

