-- name: clock
-- "Now" for one operation: read once under the lock, every time below is computed from it.
SELECT strftime('%Y-%m-%d %H:%M:%f', 'now') AS now

-- name: has_claimable
-- The idle worker's poll, before any claim: is a job of its queues (and kinds) due? One
-- read of the claim's partial index (queued rows only), stopping at the first due row,
-- outside any write transaction: an idle worker never takes the file's write lock.
SELECT EXISTS (
    SELECT 1 FROM jobs INDEXED BY ix_jobs_claimable
    WHERE state = 'queued' AND parents_pending = 0 AND queue IN (SELECT value FROM json_each(:queues)) AND run_after <= :now
      AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
) AS claimable

-- name: open_attempt
-- Invariant 3: every attempt has its row from the moment it starts.
INSERT INTO job_attempts (job_id, claim, attempt, worker, due_at, started_at)
VALUES (:job_id, :claim, :attempt, :owner, :due_at, :now)

-- fragment: now
-- "Now" in a statement: the instant the store read once under its write lock (NOW) and
-- passes to every statement of the transaction. PostgreSQL's reads the database clock.
:now

-- fragment: fenced
-- Invariant 1, the fence: a lease holder's write matches its job only while the token it
-- was handed (claims, attempts, lease_owner) is the job's and the job still runs. Every
-- write by a worker (heartbeat, complete, fail, release, cancel acknowledged) ends so.
id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner AND state = 'running'

-- name: renew_lease
-- Invariant 1: fenced on the token; a reaped or reclaimed job matches no row.
-- Heartbeat and progress are one statement; the item outcomes it carries are
-- written in the same transaction, only if it matched (STORE_ITEM), and their
-- change to the job's counts (``ok_delta``, ``failed_delta``) goes in with it.
UPDATE jobs
SET lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', :now, :lease_seconds || ' seconds'),
    done = coalesce(:done, done),
    total = coalesce(:total, total),
    checkpoint = coalesce(:checkpoint, checkpoint),
    items_ok = items_ok + :ok_delta,
    items_failed = items_failed + :failed_delta,
    updated_at = :now
WHERE {{fenced}}
RETURNING cancel_requested

-- name: complete_jobs
-- Invariant 1: fenced; the result row is written only after this matched.
UPDATE jobs
SET state = 'succeeded',
    result_id = :result_id,
    -- the handler's last progress, if it came after the last heartbeat; success with a total is all done
    total = coalesce(:total, total),
    done = CASE WHEN coalesce(:total, total) > 0 THEN coalesce(:total, total) ELSE coalesce(:done, done) END,
    items_ok = items_ok + :ok_delta,
    items_failed = items_failed + :failed_delta,
    lease_expires_at = NULL,
    finished_at = :now,
    updated_at = :now
WHERE {{fenced}}
RETURNING id, dependents_version

-- name: store_result
-- The result row, written only after COMPLETE_JOBS matched (same transaction).
INSERT INTO job_results (id, job_id, body, created_at) VALUES (:result_id, :job_id, :body, :now)

-- name: fail_job
-- Invariant 1: fenced. Invariant 3: the error goes on the job and on its attempt.
-- The caller brings the retry decision (service.retry): :retry queues the job
-- again, due :delay seconds from now; otherwise it fails. A job whose
-- cancellation was requested ends cancelled either way. Every SET expression
-- reads the row as it was, so the CASEs all see the same cancel_requested.
-- The reaper writes expired jobs through this statement too, fenced on the token
-- it read under the write lock, with a NULL error to keep a cancelled job's own.
UPDATE jobs
SET state = CASE WHEN cancel_requested THEN 'cancelled' WHEN :retry THEN 'queued' ELSE 'failed' END,
    error = coalesce(:error, error),
    error_group = coalesce(:error_group, error_group),
    run_after = CASE WHEN NOT cancel_requested AND :retry
                     THEN strftime('%Y-%m-%d %H:%M:%f', :now, :delay || ' seconds') ELSE run_after END,
    lease_owner = CASE WHEN NOT cancel_requested AND :retry THEN NULL ELSE lease_owner END,
    lease_expires_at = NULL,
    finished_at = CASE WHEN NOT cancel_requested AND :retry THEN NULL ELSE :now END,
    updated_at = :now
WHERE {{fenced}}
RETURNING state, run_after

-- name: release_job
-- Graceful shutdown: back to queued now, the attempt not charged (attempts - 1);
-- a job whose cancellation was requested ends cancelled instead, as in fail and reap.
UPDATE jobs
SET state = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'queued' END,
    attempts = CASE WHEN cancel_requested THEN attempts ELSE attempts - 1 END,
    lease_owner = CASE WHEN cancel_requested THEN lease_owner END,
    lease_expires_at = NULL,
    run_after = CASE WHEN cancel_requested THEN run_after ELSE :now END,
    finished_at = CASE WHEN cancel_requested THEN :now END,
    updated_at = :now
WHERE {{fenced}}
RETURNING state

-- name: acknowledge_cancel
-- The worker saw cancel_requested on a heartbeat and stopped: fenced like the rest.
UPDATE jobs
SET state = 'cancelled', lease_expires_at = NULL, finished_at = :now, updated_at = :now
WHERE {{fenced}}
RETURNING id

-- name: close_attempt
-- Invariant 3: the attempt's outcome (and error), written with the job's own fenced write.
UPDATE job_attempts
SET finished_at = :now, outcome = :outcome, error = :error
WHERE job_id = :job_id AND claim = :claim AND finished_at IS NULL

-- name: next_tenant
-- The claim is the fair, limited pick below (NEXT_TENANT ... COUNT_STARTS), then CLAIM_JOB
-- per picked job. Invariant 1: BEGIN IMMEDIATE holds the write lock from the first read to
-- the last update, so no other claimer can pick the same row. attempts + 1 and the lease
-- are set in the same statement: the fencing token is born with the claim. Invariant 2:
-- the lease expiry is computed from the clock read under the lock.
--
-- The fair claim, limited: see SqliteStore.claim; PostgreSQL's claim_jobs says what it keeps.
-- BEGIN IMMEDIATE makes the claim the only writer from its first read to its commit, so
-- the counters it reads are exact and no other claim or finish moves them meanwhile.
--
-- The next tenant after :after (name order) with a due job of the worker's kinds in :queue.
SELECT tenant FROM jobs INDEXED BY ix_jobs_claimable
WHERE state = 'queued' AND parents_pending = 0 AND queue = :queue AND tenant > :after AND run_after <= :now
  AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
ORDER BY tenant
LIMIT 1

-- name: tenant_jobs
-- A tenant's next due jobs in one queue, in its own priority order, skipping jobs in
-- a kind, queue or key scope that has no room (room is checked exactly in Python).
SELECT id, tenant, kind, queue, concurrency_key, priority, run_after FROM jobs INDEXED BY ix_jobs_claimable
WHERE state = 'queued' AND parents_pending = 0 AND queue = :queue AND tenant = :tenant AND run_after <= :now
  AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
  AND NOT EXISTS (SELECT 1 FROM scope_counters AS s
                  WHERE s.scope IN ({{scopes_below_tenant(jobs)}})
                    AND s.concurrency IS NOT NULL AND s.running >= s.concurrency)
ORDER BY priority DESC, run_after, id
LIMIT :limit

-- name: tenant_running
-- A tenant's running jobs: its place in the fair share (virtual time).
SELECT count(*) AS running FROM jobs WHERE state = 'running' AND tenant = :tenant

-- name: tenant_weight
-- A tenant's weight: its own, else tenant:*'s, else 1.
SELECT coalesce((SELECT weight FROM limits WHERE scope = 'tenant:' || :tenant),
                (SELECT weight FROM limits WHERE scope = 'tenant:*'), 1.0) AS weight

-- name: default_tenant_limited
-- Whether a tenant:* limit counts anything (see the fragment).
SELECT {{every_tenant_limited}} AS limited

-- name: counters
-- The counters of the scopes named, read under the write lock: exact.
SELECT scope, running, concurrency, rate, per_seconds, window_start, window_starts FROM scope_counters
WHERE scope IN (SELECT value FROM json_each(:scopes))

-- name: claim_job
-- Invariants 1 and 2: one picked job claimed, the fencing token and the lease in one write;
-- only while still queued.
UPDATE jobs
SET state = 'running',
    attempts = attempts + 1,
    claims = claims + 1,
    -- the kind's max_attempts (the claimer's handler's): the default of a job that named
    -- none, a ceiling on one that did; never below this attempt. min/max of a NULL is NULL.
    max_attempts = coalesce(
        max(attempts + 1, CASE WHEN max_attempts_default
                               THEN (SELECT value FROM json_each(:kind_max_attempts) WHERE key = jobs.kind)
                               ELSE min(max_attempts,
                                        (SELECT value FROM json_each(:kind_max_attempts) WHERE key = jobs.kind))
                          END),
        max_attempts),
    lease_owner = :worker,
    lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', :now, :lease_seconds || ' seconds'),
    started_at = :now,
    updated_at = :now
WHERE id = :id AND state = 'queued'
RETURNING id, kind, queue, tenant, payload, checkpoint, done, total, attempts, claims, max_attempts,
          lease_expires_at, run_after, items_ok, items_failed

-- name: count_starts
-- The claim's additions: running + jobs, and the starts in the rate window :window.
UPDATE scope_counters
SET running = running + :jobs,
    window_start = CASE WHEN rate IS NULL THEN window_start ELSE :window END,
    window_starts = CASE WHEN rate IS NULL THEN window_starts
                         WHEN window_start = :window THEN window_starts + :jobs ELSE :jobs END
WHERE scope = :scope

-- name: give_back
-- A slot given back, in the transaction that ends the run (complete, fail, release,
-- cancel acknowledged, reap): the job's scopes' counters, where they exist, count one less.
UPDATE scope_counters SET running = running - 1
WHERE EXISTS (SELECT 1 FROM jobs AS j WHERE j.id = :job_id AND scope_counters.scope IN ({{job_scopes(j)}}))

-- name: tenant_counter
-- A tenant:* limit gives each tenant a counter of its own, made with its first queued job.
INSERT INTO scope_counters (scope, concurrency, rate, per_seconds)
SELECT 'tenant:' || :tenant, coalesce(own.concurrency, d.concurrency), coalesce(own.rate, d.rate),
       coalesce(own.per_seconds, d.per_seconds)
FROM limits AS d LEFT JOIN limits AS own ON own.scope = 'tenant:' || :tenant
WHERE d.scope = 'tenant:*' AND coalesce(own.concurrency, d.concurrency, own.rate, d.rate) IS NOT NULL
ON CONFLICT (scope) DO NOTHING
