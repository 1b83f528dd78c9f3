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
    run_after, created_at, started_at, finished_at, updated_at, result_id, items_ok, items_failed,
    (state = 'running' AND lease_expires_at < :now) AS stale
"""

# -- enqueue_jobs --
# A tenant's idempotency key that is already taken inserts nothing; the caller
# then reads the existing job with READ_BY_IDEMPOTENCY_KEYS.
ENQUEUE_JOBS = (
    """
INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                  max_attempts_default, done, total, run_after, concurrency_key, idempotency_key,
                  created_at, updated_at)
VALUES (:id, :tenant, :queue, :kind, :payload, 'queued', :priority, 0, :max_attempts,
        :max_attempts_default, 0, :total, coalesce(:run_after, strftime('%Y-%m-%d %H:%M:%f', :now, :delay || ' seconds')),
        :concurrency_key, :idempotency_key, :now, :now)
ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING """
    + STATUS_COLUMNS
)

READ_BY_IDEMPOTENCY_KEYS = (
    """
SELECT """
    + STATUS_COLUMNS
    + """
FROM jobs WHERE tenant = :tenant AND idempotency_key = :idempotency_key
"""
)

# -- claim_jobs --
# The claim is the fair, limited pick below (NEXT_TENANT ... COUNT_STARTS), then CLAIM_JOB
# per picked job. Invariant 1: BEGIN IMMEDIATE holds the write lock from the first read to
# the last update, so no other claimer can pick the same row. attempts + 1 and the lease
# are set in the same statement: the fencing token is born with the claim. Invariant 2:
# the lease expiry is computed from the clock read under the lock.

# Invariant 3: every attempt has its row from the moment it starts.
OPEN_ATTEMPT = """
INSERT INTO job_attempts (job_id, claim, attempt, worker, due_at, started_at)
VALUES (:job_id, :claim, :attempt, :owner, :due_at, :now)
"""

# -- renew_lease --
# Invariant 1: fenced on the token; a reaped or reclaimed job matches no row.
# Heartbeat and progress are one statement; the item outcomes it carries are
# written in the same transaction, only if it matched (STORE_ITEM), and their
# change to the job's counts (``ok_delta``, ``failed_delta``) goes in with it.
RENEW_LEASE = """
UPDATE jobs
SET lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', :now, :lease_seconds || ' seconds'),
    done = coalesce(:done, done),
    total = coalesce(:total, total),
    checkpoint = coalesce(:checkpoint, checkpoint),
    items_ok = items_ok + :ok_delta,
    items_failed = items_failed + :failed_delta,
    updated_at = :now
WHERE id = :job_id AND claims = :claim AND attempts = :attempt AND lease_owner = :owner
  AND state = 'running'
RETURNING cancel_requested
"""

# The outcomes already stored for the items about to be written: an item re-run after it
# failed (a retry past max_item_failures) moves from failed to its new state.
PRIOR_ITEM_STATES = """
SELECT state, count(*) AS n FROM job_items
WHERE job_id = :job_id AND item_index IN (SELECT value FROM json_each(:indexes))
GROUP BY state
"""

STORE_ITEM = """
INSERT INTO job_items (job_id, item_index, state, result, error, error_group, attempt, finished_at)
VALUES (:job_id, :item_index, :state, :result, :error, :error_group, :attempt, :now)
ON CONFLICT (job_id, item_index) DO UPDATE
SET state = excluded.state, result = excluded.result, error = excluded.error,
    error_group = excluded.error_group, attempt = excluded.attempt, finished_at = excluded.finished_at
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
    items_ok = items_ok + :ok_delta,
    items_failed = items_failed + :failed_delta,
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

CANCEL_JOB = (
    """
UPDATE jobs
SET state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
    cancel_requested = (state = 'running'),
    finished_at = CASE WHEN state = 'queued' THEN :now ELSE finished_at END,
    updated_at = :now
WHERE id = :job_id AND (:tenant IS NULL OR tenant = :tenant) AND state IN ('queued', 'running')
RETURNING """
    + STATUS_COLUMNS
)

# -- replay_jobs --
# Invariant 5: terminal jobs change only through replay, and every replay is recorded.
FIND_REPLAYABLE = """
SELECT id, tenant, state, error, attempts FROM jobs
WHERE state IN (SELECT value FROM json_each(:states))
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
  AND (:kind IS NULL OR kind = :kind)
  AND (:error_like IS NULL OR error LIKE :error_like ESCAPE '\\')
  AND (:error_group IS NULL OR error_group = :error_group)
  AND (:since IS NULL OR finished_at >= :since)
  AND (NOT :failed_items OR items_failed > 0)
ORDER BY id
"""

REPLAY_JOB = """
UPDATE jobs
SET state = 'queued', attempts = 0, error = NULL, error_group = NULL, cancel_requested = 0, lease_owner = NULL,
    lease_expires_at = NULL, run_after = :now, finished_at = NULL,
    items_failed = CASE WHEN :failed_items THEN 0 ELSE items_failed END,
    done = CASE WHEN :failed_items THEN items_ok ELSE done END,
    updated_at = :now
WHERE id = :job_id
"""

# A replay of failed items: their outcomes go, the ok ones stay (the next attempt skips those).
CLEAR_FAILED_ITEMS = """
DELETE FROM job_items WHERE job_id = :job_id AND state = 'failed'
"""

RECORD_REPLAY = """
INSERT INTO job_replays (job_id, replayed_at, replayed_by, previous_state, previous_error,
                         previous_attempts)
VALUES (:job_id, :now, :by, :state, :error, :attempts)
"""

# -- the fair claim, limited (see store.py claim; PostgreSQL's CLAIM_JOBS says what it keeps) --
# BEGIN IMMEDIATE makes the claim the only writer from its first read to its commit, so
# the counters it reads are exact and no other claim or finish moves them meanwhile.

# The next tenant after :after (name order) with a due job of the worker's kinds in :queue.
NEXT_TENANT = """
SELECT tenant FROM jobs INDEXED BY ix_jobs_claimable
WHERE state = 'queued' AND queue = :queue AND tenant > :after AND run_after <= :now
  AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
ORDER BY tenant
LIMIT 1
"""

# A tenant's next due jobs in one queue, in its own priority order, skipping jobs in
# a kind, queue or key scope that has no room (room is checked exactly in Python).
TENANT_JOBS = """
SELECT id, tenant, kind, queue, concurrency_key, priority, run_after FROM jobs INDEXED BY ix_jobs_claimable
WHERE state = 'queued' AND queue = :queue AND tenant = :tenant AND run_after <= :now
  AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
  AND NOT EXISTS (SELECT 1 FROM scope_counters AS s
                  WHERE s.scope IN ('kind:' || kind, 'queue:' || queue, 'key:' || concurrency_key)
                    AND s.concurrency IS NOT NULL AND s.running >= s.concurrency)
ORDER BY priority DESC, run_after, id
LIMIT :limit
"""

TENANT_RUNNING = "SELECT count(*) AS running FROM jobs WHERE state = 'running' AND tenant = :tenant"

TENANT_WEIGHT = """
SELECT coalesce((SELECT weight FROM limits WHERE scope = 'tenant:' || :tenant),
                (SELECT weight FROM limits WHERE scope = 'tenant:*'), 1.0) AS weight
"""

# Whether a tenant:* limit counts anything: then every tenant must have a counter.
DEFAULT_TENANT_LIMITED = """
SELECT EXISTS (SELECT 1 FROM limits WHERE scope = 'tenant:*'
               AND (concurrency IS NOT NULL OR rate IS NOT NULL)) AS limited
"""

COUNTERS = """
SELECT scope, running, concurrency, rate, per_seconds, window_start, window_starts FROM scope_counters
WHERE scope IN (SELECT value FROM json_each(:scopes))
"""

CLAIM_JOB = """
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
"""

# The claim's additions: running + jobs, and the starts in the rate window :window.
COUNT_STARTS = """
UPDATE scope_counters
SET running = running + :jobs,
    window_start = CASE WHEN rate IS NULL THEN window_start ELSE :window END,
    window_starts = CASE WHEN rate IS NULL THEN window_starts
                         WHEN window_start = :window THEN window_starts + :jobs ELSE :jobs END
WHERE scope = :scope
"""

# A slot given back, in the transaction that ends the run (complete, fail, release,
# cancel acknowledged, reap): the job's scopes' counters, where they exist, count one less.
GIVE_BACK = """
UPDATE scope_counters SET running = running - 1
WHERE scope IN (SELECT 'tenant:' || tenant FROM jobs WHERE id = :job_id
                UNION ALL SELECT 'kind:' || kind FROM jobs WHERE id = :job_id
                UNION ALL SELECT 'queue:' || queue FROM jobs WHERE id = :job_id
                UNION ALL SELECT 'key:' || concurrency_key FROM jobs WHERE id = :job_id)
"""

# A tenant:* limit gives each tenant a counter of its own, made with its first queued job.
TENANT_COUNTER = """
INSERT INTO scope_counters (scope, concurrency, rate, per_seconds)
SELECT 'tenant:' || :tenant, coalesce(own.concurrency, d.concurrency), coalesce(own.rate, d.rate),
       coalesce(own.per_seconds, d.per_seconds)
FROM limits AS d LEFT JOIN limits AS own ON own.scope = 'tenant:' || :tenant
WHERE d.scope = 'tenant:*' AND coalesce(own.concurrency, d.concurrency, own.rate, d.rate) IS NOT NULL
ON CONFLICT (scope) DO NOTHING
"""

# -- limits (an operator's change, one write transaction) --
SET_LIMIT = """
INSERT INTO limits (scope, concurrency, rate, per_seconds, weight, updated_at)
VALUES (:scope, :concurrency, :rate, :per_seconds, :weight, :now)
ON CONFLICT (scope) DO UPDATE
SET concurrency = excluded.concurrency, rate = excluded.rate, per_seconds = excluded.per_seconds,
    weight = excluded.weight, updated_at = excluded.updated_at
"""

DELETE_LIMIT = "DELETE FROM limits WHERE scope = :scope RETURNING scope"

# The scopes a change touches: the one named, or for tenant:* every tenant with a counter
# or active jobs; each with its limit in force (a tenant's own, else tenant:*'s).
CHANGED_SCOPES = """
WITH wanted AS (
    SELECT :scope AS scope WHERE :scope <> 'tenant:*'
    UNION SELECT scope FROM scope_counters WHERE :scope = 'tenant:*' AND scope LIKE 'tenant:%'
    UNION SELECT DISTINCT 'tenant:' || tenant FROM jobs WHERE :scope = 'tenant:*' AND state IN ('queued', 'running')
)
SELECT w.scope,
       coalesce(own.concurrency, d.concurrency) AS concurrency,
       coalesce(own.rate, d.rate) AS rate,
       coalesce(own.per_seconds, d.per_seconds) AS per_seconds,
       (SELECT count(*) FROM jobs AS j WHERE j.state = 'running'
          AND w.scope IN ('tenant:' || j.tenant, 'kind:' || j.kind, 'queue:' || j.queue,
                          'key:' || j.concurrency_key)) AS running
FROM wanted AS w
LEFT JOIN limits AS own ON own.scope = w.scope
LEFT JOIN limits AS d ON d.scope = 'tenant:*' AND w.scope LIKE 'tenant:%'
"""

DROP_COUNTER = "DELETE FROM scope_counters WHERE scope = :scope"

PUT_COUNTER = """
INSERT INTO scope_counters AS c (scope, running, concurrency, rate, per_seconds)
VALUES (:scope, :running, :concurrency, :rate, :per_seconds)
ON CONFLICT (scope) DO UPDATE
SET running = excluded.running, concurrency = excluded.concurrency, rate = excluded.rate,
    per_seconds = excluded.per_seconds,
    window_start = CASE WHEN c.rate IS excluded.rate AND c.per_seconds IS excluded.per_seconds
                        THEN c.window_start END,
    window_starts = CASE WHEN c.rate IS excluded.rate AND c.per_seconds IS excluded.per_seconds
                         THEN c.window_starts ELSE 0 END
"""
