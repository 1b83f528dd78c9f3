-- fragment: now
-- "Now" in a statement: the database's clock, never a worker's (invariant 2: hosts drift).
-- :now is NULL in production; tests pass a pinned instant instead of sleeping.
-- The statement's start, not the transaction's (now()): a transaction that waited for a row
-- lock must not stamp what it does after the wait with an instant from before it. A parent's
-- completion that waited for its child's row, held by another parent's completion, freed the
-- child and claimed it in its refill: with now() the child "started" before that other
-- parent "finished", though it committed after it (bench workflows, fan-in).
coalesce(:now::timestamptz, statement_timestamp())

-- fragment: notify_changed
-- Appended to the RETURNING list of every statement that changes a job's state or
-- progress: one JOB_CHANGED notification per changed job, delivered at commit, so
-- long polls answer at once. Off (NULL) when the store's notify setting is off.
CASE WHEN :notify THEN pg_notify('jobq_job_changes', j.id::text) END AS notified

-- fragment: fenced
-- Invariant 1, the fence: a lease holder's write matches its job (alias j) only while the
-- token it was handed (claims, attempts, lease_owner) is the job's and the job still runs.
-- Every write by a worker (heartbeat, fail, release, cancel acknowledged) ends so;
-- COMPLETE_JOBS checks the same on each row it locks (``held``).
j.id = :job_id AND j.claims = :claim AND j.attempts = :attempt AND j.lease_owner = :owner AND j.state = 'running'

-- name: renew_lease
-- Invariant 1: fenced on the token; a reaped or reclaimed job matches no row, and
-- the caller learns it lost the lease. Heartbeat and progress are one statement,
-- so a job's progress is never fresher than its lease; the item outcomes recorded
-- since the last heartbeat go in the same statement (data-modifying CTEs), fenced
-- with it. No indexed column of jobs is written (the item counts are unindexed),
-- so the update of jobs stays HOT; the items are INSERTs into job_items.
WITH n AS (
    SELECT {{now}} AS ts
),
item_input AS ({{item_input}}),
deltas AS ({{item_deltas}}),
written AS (
    UPDATE jobs AS j
    SET lease_expires_at = n.ts + make_interval(secs => :lease_seconds),
        done = coalesce(:done, j.done),
        total = coalesce(:total, j.total),
        checkpoint = coalesce(:checkpoint::jsonb, j.checkpoint),
        items_ok = j.items_ok + coalesce(d.ok, 0),
        items_failed = j.items_failed + coalesce(d.failed, 0),
        updated_at = n.ts
    FROM n LEFT JOIN deltas AS d ON true
    WHERE {{fenced}}
    RETURNING j.id, j.attempts, n.ts, j.cancel_requested,
              CASE WHEN :notify AND (:done::int IS NOT NULL OR d.job_id IS NOT NULL)
                   THEN pg_notify('jobq_job_changes', j.id::text) END AS notified
),
stored AS ({{store_items}})
SELECT cancel_requested, notified FROM written

-- name: refill_lock_timeout
-- complete_and_claim's transaction first gives its finished jobs' scope slots back
-- (COMPLETE_JOBS locks those counters) and then claims, which may wait for other
-- counters. Two finishers, each waiting for a counter the other just gave back, would
-- deadlock until deadlock_timeout (1 s) — the limited drain fell to a third of the
-- unlimited one. So the refill waits at most this long; past it, the store commits the
-- completion on its own and claims after it, holding nothing while it waits. Normal
-- contention (another claim's few milliseconds) stays under it. The bound is the
-- statements' only: REFILL_LOCK_TIMEOUT_END lifts it before the commit.
SELECT set_config('lock_timeout', '50ms', true)

-- name: refill_lock_timeout_end
-- The refill's bound ends with its claim, so the commit at the pipeline's Sync waits as
-- every commit does. A transaction that sent NOTIFY (COMPLETE_JOBS and the claim do) takes
-- PostgreSQL's notify lock as it commits (PreCommit_Notify: one database-wide lock, which
-- orders the commits of every notifying transaction), and under load a commit queues there
-- behind others'. Bounded by REFILL_LOCK_TIMEOUT, it timed out there (issue 26): the
-- completion rolled back, and the error came as the answer to the Sync itself, which
-- psycopg pairs with the Sync's one result and stops reading while libpq still holds the
-- ReadyForQuery: "cannot exit pipeline mode while busy", the connection thrown away. No
-- deadlock waits there: each transaction takes that lock last, after all of its row locks.
SELECT set_config('lock_timeout', '0', true)

-- name: complete_jobs
-- Invariant 1: a result is stored only for a token that still holds its job; each
-- job, its result row and its attempt row change together or not at all. Many
-- jobs in one statement (arrays unnested), so a busy worker finishes a batch in
-- one round trip; a lost lease in the batch affects only its own row. The item
-- outcomes recorded since the last heartbeat are written with the result.
-- The fenced rows are found (and locked, in the id order the caller sorted the
-- input in) one primary-key lookup per input row, through LATERAL: joined as a
-- set, the planner may instead read every entry of ix_jobs_running — which
-- holds an entry for each job that ran since the last vacuum — to finish 25 jobs.
-- The batch is one JSON parameter, not six arrays: its row estimate does not
-- depend on the batch's size, so PostgreSQL settles on one generic plan for the
-- prepared statement. With arrays, a custom plan that knows a small batch's
-- length always looked cheaper, and every batch was planned again (~0.6 ms).
WITH n AS (
    SELECT {{now}} AS ts
),
input AS (
    SELECT *
    FROM jsonb_to_recordset(:batch::jsonb)
         AS i(job_id uuid, claim int, attempt int, owner text, result_id uuid, body text,
              done int, total int)
),
item_input AS ({{item_input}}),
deltas AS ({{item_deltas}}),
held AS (
    -- Each row is locked through its primary key alone (OFFSET 0 keeps the fence from being
    -- pushed inside), then the token is checked on the row as locked, its newest version.
    -- With the fence inside, a generic plan reads ix_jobs_running (state = 'running'),
    -- dead entries and all, for every job of the batch.
    -- Workflows: ``raced`` is a job that gained children while this statement waited for its
    -- row (an enqueue's lock_parents bumped dependents_version, committed after this
    -- statement's snapshot, whose edges it cannot see). Such a job is not written here; the
    -- store writes it again behind lock_jobs (:recheck false), so no child is left waiting for
    -- a parent that succeeded. A job that never had children (version 0) reads nothing more.
    SELECT i.*, j.dependents_version,
           (:recheck AND j.dependents_version <> 0
            AND j.dependents_version <> (SELECT s.dependents_version FROM jobs AS s WHERE s.id = i.job_id)) AS raced
    FROM input AS i
    CROSS JOIN LATERAL (
        SELECT j.claims, j.attempts, j.lease_owner, j.state, j.dependents_version
        FROM jobs AS j
        WHERE j.id = i.job_id
        FOR UPDATE
        OFFSET 0
    ) AS j
    WHERE j.claims = i.claim AND j.attempts = i.attempt AND j.lease_owner = i.owner AND j.state = 'running'
),
finished AS (
    UPDATE jobs AS j
    SET state = 'succeeded',
        result_id = i.result_id,
        -- the handler's last progress, if it came after the last heartbeat; success with a total is all done
        total = coalesce(i.total, j.total),
        done = CASE WHEN coalesce(i.total, j.total) > 0 THEN coalesce(i.total, j.total)
                    ELSE coalesce(i.done, j.done) END,
        items_ok = j.items_ok + coalesce(d.ok, 0),
        items_failed = j.items_failed + coalesce(d.failed, 0),
        lease_expires_at = NULL,
        finished_at = n.ts,
        updated_at = n.ts
    FROM held AS i LEFT JOIN deltas AS d ON d.job_id = i.job_id, n
    WHERE j.id = i.job_id AND NOT i.raced
    RETURNING j.id, j.attempts, n.ts, i.claim, i.result_id, i.body, j.tenant, j.kind, j.queue, j.concurrency_key,
              j.dependents_version, {{notify_changed}}
),{{give_back(finished)}},
met AS (
    -- Workflows: the children of the finished jobs, each with how many of its parents finished
    -- here. Only jobs that ever had children look for edges.
    SELECT e.child, count(*) AS met
    FROM finished AS f JOIN job_edges AS e ON e.parent = f.id
    WHERE f.dependents_version <> 0
    GROUP BY e.child
    ORDER BY e.child
),
freeing AS ({{waiting(met)}}),
released AS (
    -- They count those parents less, all in this statement (a fan-out of 10,000 is one update
    -- of 10,000 rows, not 10,000 statements); a child whose last parent this was gets its own
    -- due time back and becomes claimable.
    UPDATE jobs AS c
    SET parents_pending = c.parents_pending - r.met,
        run_after = CASE WHEN c.parents_pending = r.met THEN greatest(n.ts, coalesce(c.due_after_parents, n.ts))
                         ELSE c.run_after END,
        updated_at = n.ts
    FROM freeing AS r, n
    WHERE c.id = r.child
    RETURNING c.queue, c.parents_pending
),
woke AS (
    -- One JOBS_QUEUED wake-up for the children made due, whatever their number.
    SELECT CASE WHEN :notify THEN pg_notify('jobq_jobs', string_agg(DISTINCT queue, ',')) END AS woke
    FROM released WHERE parents_pending = 0 HAVING count(*) > 0
),
written AS (
    SELECT id, attempts, ts FROM finished
),
stored_items AS ({{store_items}}),
stored AS (
    INSERT INTO job_results (id, job_id, body, created_at)
    SELECT f.result_id, f.id, f.body::jsonb, n.ts FROM finished AS f, n
),
closed AS (
    -- Each attempt row by its (job_id, claim) key, joined from the finished rows: one
    -- unique-index probe per job, which the planner prefers at any table size because it
    -- expects one row from ``finished``. (``a.id = ANY(ARRAY(...))`` made it expect ten,
    -- and a plan prepared while job_attempts was small read all of job_attempts for every
    -- batch ever after, as the table grew: a drain that slowed with every job it finished.)
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'succeeded'
    FROM finished AS f, n
    WHERE a.job_id = f.id AND a.claim = f.claim AND a.outcome IS NULL
)
SELECT id, false AS raced, (SELECT count(*) FROM woke) AS woke FROM finished
UNION ALL
SELECT job_id, true, 0 FROM held WHERE raced

-- name: fail_job
-- Invariant 1: fenced like COMPLETE_JOBS. Invariant 3: the error is stored on the
-- job and on its attempt. The caller brings the retry decision (service.retry):
-- :retry queues the job again, due :delay seconds from now; otherwise it
-- fails. A job whose cancellation was requested ends cancelled either way.
WITH n AS (
    SELECT {{now}} AS ts
),
decision AS (
    SELECT id,
           CASE WHEN cancel_requested THEN 'cancelled'
                WHEN :retry THEN 'queued'
                ELSE 'failed' END AS next_state
    FROM jobs
    WHERE id = :job_id
),
changed AS (
    UPDATE jobs AS j
    SET state = d.next_state,
        error = :error,
        error_group = :error_group,
        run_after = CASE WHEN d.next_state = 'queued'
                         THEN n.ts + make_interval(secs => :delay) ELSE j.run_after END,
        lease_owner = CASE WHEN d.next_state = 'queued' THEN NULL ELSE j.lease_owner END,
        lease_expires_at = NULL,
        finished_at = CASE WHEN d.next_state = 'queued' THEN NULL ELSE n.ts END,
        updated_at = n.ts
    FROM decision AS d, n
    WHERE j.id = d.id AND {{fenced}}
    RETURNING j.id, j.state, j.run_after, j.tenant, j.kind, j.queue, j.concurrency_key, {{notify_changed}}
),{{give_back(changed)}},
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'failed', error = :error
    FROM changed, n
    WHERE a.job_id = changed.id AND a.claim = :claim AND a.finished_at IS NULL
)
SELECT state, run_after FROM changed

-- name: release_job
-- Graceful shutdown hands a job back at once. The attempt is not charged
-- (attempts - 1): a deploy is not the job's fault, and the claims counter keeps
-- the old token from ever matching again. Idle workers are woken (JOBS_QUEUED),
-- so the job moves on without waiting for a poll. A job whose cancellation was
-- requested is not handed back but ends cancelled, as fail and reap do.
WITH n AS (
    SELECT {{now}} AS ts
),
released AS (
    UPDATE jobs AS j
    SET state = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
        attempts = CASE WHEN j.cancel_requested THEN j.attempts ELSE j.attempts - 1 END,
        lease_owner = CASE WHEN j.cancel_requested THEN j.lease_owner END,
        lease_expires_at = NULL,
        run_after = CASE WHEN j.cancel_requested THEN j.run_after ELSE n.ts END,
        finished_at = CASE WHEN j.cancel_requested THEN n.ts END,
        updated_at = n.ts
    FROM n
    WHERE {{fenced}}
    RETURNING j.id, j.state, j.tenant, j.kind, j.queue, j.concurrency_key, {{notify_changed}},
              CASE WHEN :notify AND j.state = 'queued' THEN pg_notify('jobq_jobs', j.queue) END AS woke
),{{give_back(released)}},
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts,
        outcome = CASE WHEN released.state = 'cancelled' THEN 'cancelled' ELSE 'released' END
    FROM released, n
    WHERE a.job_id = released.id AND a.claim = :claim AND a.finished_at IS NULL
)
SELECT count(*) AS released FROM released

-- name: acknowledge_cancel
-- The worker saw cancel_requested on a heartbeat and stopped: fenced like the rest.
WITH n AS (
    SELECT {{now}} AS ts
),
stopped AS (
    UPDATE jobs AS j
    SET state = 'cancelled', lease_expires_at = NULL, finished_at = n.ts, updated_at = n.ts
    FROM n
    WHERE {{fenced}}
    RETURNING j.id, j.tenant, j.kind, j.queue, j.concurrency_key, {{notify_changed}}
),{{give_back(stopped)}},
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'cancelled'
    FROM stopped, n
    WHERE a.job_id = stopped.id AND a.claim = :claim AND a.finished_at IS NULL
)
SELECT count(*) AS stopped FROM stopped

