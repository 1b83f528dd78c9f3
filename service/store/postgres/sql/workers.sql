-- name: register_worker
-- A worker's row at start-up (its queues, kinds and slots); a restart under its id only
-- touches it.
INSERT INTO workers (id, host, pid, queues, kinds, concurrency, started_at, last_seen_at)
VALUES (:id, :host, :pid, :queues::jsonb, :kinds::jsonb, :concurrency,
        {{now}}, {{now}})
ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at


-- name: check_in
-- A worker's periodic word with the database, one statement, so an idle worker costs one
-- transaction per interval (issue 24; service.maintenance.presence): the touch (the worker is
-- alive: last_seen_at), the leadership taken, renewed or its holder's expiry learnt (the lead
-- fragment, as acquire_leadership), and what the worker paces itself by. peers: the live
-- workers (seen within :alive_seconds) sharing a queue with it that have a slot free, itself
-- counted (at least 1): an idle worker's polls are spread by them (service.worker.claimer).
-- next_schedule_in: seconds until the earliest unpaused schedule is due (NULL: none), so the
-- leader reads the schedules only when one is due (ix_schedules_due: one index entry).
-- jobs_running: whether any job runs, so the leader's reaper rests while none does (a job
-- that starts is seen at the leader's next check-in, a third of its lease later at most).
-- Running jobs are read through ix_jobs_running (running rows only): an idle fleet has none.
WITH n AS (
    SELECT {{now}} AS ts
),
me AS (
    UPDATE workers AS w SET last_seen_at = n.ts FROM n WHERE w.id = :owner
    RETURNING ARRAY(SELECT jsonb_array_elements_text(w.queues)) AS queues
),
{{lead}},
peers AS (
    SELECT w.id, w.concurrency
    FROM workers AS w, me, n
    WHERE w.last_seen_at > n.ts - make_interval(secs => :alive_seconds) AND w.queues ?| me.queues
),
held AS (
    SELECT j.lease_owner, count(*) AS running
    FROM jobs AS j
    WHERE j.state = 'running' AND j.lease_owner IN (SELECT id FROM peers)
    GROUP BY j.lease_owner
)
SELECT lead.*,
       greatest((SELECT count(*) FROM peers AS p LEFT JOIN held AS h ON h.lease_owner = p.id
                 WHERE coalesce(h.running, 0) < p.concurrency), 1) AS peers,
       (SELECT date_part('epoch', min(s.next_run_at) - n.ts)::float8
        FROM schedules AS s WHERE NOT s.paused) AS next_schedule_in,
       EXISTS (SELECT FROM jobs AS j WHERE j.state = 'running') AS jobs_running
FROM n LEFT JOIN lead ON true
