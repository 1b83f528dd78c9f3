"""The SQLite store's hot-path statements: submit, claim, heartbeat, finish, reap,
cancel and replay, each named, with the invariant it keeps.

Every write runs under ``BEGIN IMMEDIATE`` (see store.py), so a read and the
update that follows it cannot interleave with another process's write.
"""

# "Now" for one operation: read once under the lock, every time below is computed from it.
NOW = "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now') AS now"

STATUS_COLUMNS = """
    id, tenant, queue, kind, state, priority, attempts, max_attempts, done, total, error,
    cancel_requested, concurrency_key, idempotency_key, lease_owner, lease_expires_at,
    run_after, created_at, started_at, finished_at, updated_at, result_id,
    (state = 'running' AND lease_expires_at < :now) AS stale
"""

# -- enqueue_jobs --
# A tenant's idempotency key that is already taken inserts nothing; the caller
# then reads the existing job with READ_BY_IDEMPOTENCY_KEYS.
ENQUEUE_JOBS = """
INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                  done, total, run_after, concurrency_key, idempotency_key, created_at, updated_at)
VALUES (:id, :tenant, :queue, :kind, :payload, 'queued', :priority, 0, :max_attempts,
        0, :total, coalesce(:run_after, strftime('%Y-%m-%d %H:%M:%f', :now, :delay || ' seconds')),
        :concurrency_key, :idempotency_key, :now, :now)
ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING """ + STATUS_COLUMNS

READ_BY_IDEMPOTENCY_KEYS = """
SELECT """ + STATUS_COLUMNS + """
FROM jobs WHERE tenant = :tenant AND idempotency_key = :idempotency_key
"""

# -- claim_jobs --
# Invariant 1: BEGIN IMMEDIATE holds the write lock from the read to the update,
# so no other claimer can pick the same row. attempts + 1 and the lease are set
# in the same statement: the fencing token is born with the claim.
# Invariant 2: the lease expiry is computed from the clock read under the lock.
CLAIM_JOBS = """
UPDATE jobs
SET state = 'running',
    attempts = attempts + 1,
    claims = claims + 1,
    lease_owner = :worker,
    lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', :now, :lease_seconds || ' seconds'),
    started_at = :now,
    updated_at = :now
WHERE id IN (
    SELECT id FROM jobs
    WHERE state = 'queued'
      AND queue IN (SELECT value FROM json_each(:queues))
      AND run_after <= :now
      AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
    ORDER BY priority DESC, run_after, id
    LIMIT :limit
)
RETURNING id, kind, queue, tenant, payload, checkpoint, done, total, attempts, claims, max_attempts,
          lease_expires_at, run_after
"""

# Invariant 3: every attempt has its row from the moment it starts.
OPEN_ATTEMPT = """
INSERT INTO job_attempts (job_id, claim, attempt, worker, due_at, started_at)
VALUES (:job_id, :claim, :attempt, :owner, :due_at, :now)
"""

# -- renew_lease --
# Invariant 1: fenced on the token; a reaped or reclaimed job matches no row.
# Heartbeat and progress are one statement.
RENEW_LEASE = """
UPDATE jobs
SET lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', :now, :lease_seconds || ' seconds'),
    done = coalesce(:done, done),
    total = coalesce(:total, total),
    checkpoint = coalesce(:checkpoint, checkpoint),
    updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner
  AND state = 'running'
RETURNING cancel_requested
"""

# -- complete_jobs --
# Invariant 1: fenced; the result row is written only after this matched.
COMPLETE_JOBS = """
UPDATE jobs
SET state = 'succeeded',
    result_id = :result_id,
    -- the handler's last progress, if it came after the last heartbeat; success with a total is all done
    total = coalesce(:total, total),
    done = CASE WHEN coalesce(:total, total) > 0 THEN coalesce(:total, total) ELSE coalesce(:done, done) END,
    lease_expires_at = NULL,
    finished_at = :now,
    updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner
  AND state = 'running'
RETURNING id
"""

STORE_RESULT = """
INSERT INTO job_results (id, job_id, body, created_at) VALUES (:result_id, :job_id, :body, :now)
"""

# -- fail_job --
# Invariant 1: fenced. Invariant 3: the error goes on the job and on its attempt.
# The caller brings the retry decision (service.retry): :retry queues the job
# again, due :delay seconds from now; otherwise it fails. A job whose
# cancellation was requested ends cancelled either way. Every SET expression
# reads the row as it was, so the CASEs all see the same cancel_requested.
# The reaper writes expired jobs through this statement too, fenced on the token
# it read under the write lock, with a NULL error to keep a cancelled job's own.
FAIL_JOB = """
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
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner
  AND state = 'running'
RETURNING state, run_after
"""

# -- release_job --
# Graceful shutdown: back to queued now, the attempt not charged (attempts - 1);
# a job whose cancellation was requested ends cancelled instead, as in fail and reap.
RELEASE_JOB = """
UPDATE jobs
SET state = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'queued' END,
    attempts = CASE WHEN cancel_requested THEN attempts ELSE attempts - 1 END,
    lease_owner = CASE WHEN cancel_requested THEN lease_owner END,
    lease_expires_at = NULL,
    run_after = CASE WHEN cancel_requested THEN run_after ELSE :now END,
    finished_at = CASE WHEN cancel_requested THEN :now END,
    updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner
  AND state = 'running'
RETURNING state
"""

# -- acknowledge_cancel --
ACKNOWLEDGE_CANCEL = """
UPDATE jobs
SET state = 'cancelled', lease_expires_at = NULL, finished_at = :now, updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner
  AND state = 'running'
RETURNING id
"""

CLOSE_ATTEMPT = """
UPDATE job_attempts
SET finished_at = :now, outcome = :outcome, error = :error
WHERE job_id = :job_id AND claim = :claim AND finished_at IS NULL
"""

# After a finish whose outcome is unknown, the attempt's own row is the receipt.
READ_ATTEMPT_RECEIPT = """
SELECT a.outcome, j.state, j.run_after
FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
WHERE a.job_id = :job_id AND a.claim = :claim AND a.worker = :owner
"""

# -- reap_expired --
# Invariant 2: running jobs past their lease, compared with the store's clock,
# in id order and in bounded batches. Idempotent: a second reaper finds nothing.
REAP_EXPIRED = """
SELECT j.id, j.attempts, j.claims, j.max_attempts, j.lease_owner, j.cancel_requested,
       (SELECT count(*) FROM job_attempts AS a
        WHERE a.job_id = j.id AND a.outcome = 'lease_expired') + 1 AS expiries
FROM jobs AS j
WHERE j.state = 'running' AND j.lease_expires_at < :now
ORDER BY j.id
LIMIT :limit
"""

CANCEL_JOB = """
UPDATE jobs
SET state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
    cancel_requested = (state = 'running'),
    finished_at = CASE WHEN state = 'queued' THEN :now ELSE finished_at END,
    updated_at = :now
WHERE id = :job_id AND (:tenant IS NULL OR tenant = :tenant) AND state IN ('queued', 'running')
RETURNING """ + STATUS_COLUMNS

# -- replay_jobs --
# Invariant 5: terminal jobs change only through replay, and every replay is recorded.
FIND_REPLAYABLE = """
SELECT id, state, error, attempts FROM jobs
WHERE state IN (SELECT value FROM json_each(:states))
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
  AND (:kind IS NULL OR kind = :kind)
  AND (:error_like IS NULL OR error LIKE :error_like ESCAPE '\\')
  AND (:since IS NULL OR finished_at >= :since)
ORDER BY id
"""

REPLAY_JOB = """
UPDATE jobs
SET state = 'queued', attempts = 0, error = NULL, error_group = NULL, cancel_requested = 0, lease_owner = NULL,
    lease_expires_at = NULL, run_after = :now, finished_at = NULL, updated_at = :now
WHERE id = :job_id
"""

RECORD_REPLAY = """
INSERT INTO job_replays (job_id, replayed_at, replayed_by, previous_state, previous_error,
                         previous_attempts)
VALUES (:job_id, :now, :by, :state, :error, :attempts)
"""
