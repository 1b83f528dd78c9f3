-- name: register_worker
-- A worker's row at start-up (its queues, kinds and slots); a restart under its id only
-- touches it.
INSERT INTO workers (id, host, pid, queues, kinds, concurrency, started_at, last_seen_at)
VALUES (:id, :host, :pid, :queues, :kinds, :concurrency, :now, :now)
ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at


-- name: worker_peers
-- check_in's peers (service/store/postgres/sql/workers.sql says why): the live workers sharing
-- a queue with :owner that have a slot free, itself counted (at least 1).
SELECT max(count(*), 1) AS peers
FROM workers AS w
WHERE w.last_seen_at > strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :alive_seconds || ' seconds')
  AND EXISTS (
      SELECT 1 FROM workers AS me, json_each(me.queues) AS mine, json_each(w.queues) AS theirs
      WHERE me.id = :owner AND mine.value = theirs.value
  )
  AND w.concurrency > (SELECT count(*) FROM jobs AS j WHERE j.state = 'running' AND j.lease_owner = w.id)

-- name: next_schedule_in
-- check_in's next_schedule_in: seconds until the earliest unpaused schedule is due (NULL: none).
SELECT (julianday(min(next_run_at)) - julianday(:now)) * 86400.0 AS next_schedule_in
FROM schedules
WHERE NOT paused

-- name: jobs_running
-- check_in's jobs_running: whether any job runs (the leader's reaper rests while none does).
SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'running') AS jobs_running
