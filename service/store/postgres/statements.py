"""The PostgreSQL store's hot-path statements: submit, claim, heartbeat, finish, reap,
cancel and replay, each named, with the invariant it keeps.

Each is a single statement (data-modifying CTEs), so claim, heartbeat, complete,
fail and reap are one round trip each and never hold a transaction open while a
handler runs. ``%(now)s`` is NULL in production, so ``coalesce`` picks the
database clock; tests pass a pinned instant instead.
"""

_NOW = "coalesce(%(now)s::timestamptz, now())"

STATUS_COLUMNS = """
    id, tenant, queue, kind, state, priority, attempts, max_attempts, done, total, error,
    cancel_requested, concurrency_key, idempotency_key, lease_owner, lease_expires_at,
    run_after, created_at, started_at, finished_at, updated_at, result_id,
    (state = 'running' AND lease_expires_at < coalesce(%(now)s::timestamptz, now())) AS stale
"""

# -- enqueue_jobs --
# Many jobs in one statement: the batch is one jsonb parameter, so psycopg dumps
# one string (not twelve arrays element by element) and the plan does not depend
# on the batch's length. A tenant's idempotency key that is already taken inserts
# nothing: the existing job is read back by READ_BY_IDEMPOTENCY_KEYS. Only what
# the database decides comes back (id, run_after, created_at); the rest of a new
# job's status is what was inserted. The wake-up for idle workers rides in the
# same statement (one round trip, one commit): an uncorrelated subquery runs once,
# so one JOBS_QUEUED notification per statement, never per row, delivered at
# commit; none when nothing was inserted.
ENQUEUE_JOBS = """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
inserted AS (
INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                  done, total, run_after, concurrency_key, idempotency_key, created_at, updated_at)
SELECT i.id, i.tenant, i.queue, i.kind, i.payload, 'queued', i.priority, 0, i.max_attempts,
       0, i.total, coalesce(i.run_after, n.ts + make_interval(secs => i.delay)),
       i.concurrency_key, i.idempotency_key, n.ts, n.ts
FROM jsonb_to_recordset(%(batch)s::jsonb)
     AS i(id uuid, tenant text, queue text, kind text, payload jsonb, priority int, max_attempts int,
          delay float8, run_after timestamptz, total int, concurrency_key text, idempotency_key text),
     n
ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, run_after, created_at
)
SELECT inserted.*,
       (SELECT CASE WHEN %(notify)s THEN pg_notify('jobq_jobs', %(wake_queues)s) END) AS woke
FROM inserted
"""

READ_BY_IDEMPOTENCY_KEYS = """
SELECT """ + STATUS_COLUMNS + """
FROM jobs j
WHERE (j.tenant, j.idempotency_key) IN (
    SELECT * FROM unnest(%(tenants)s::text[], %(keys)s::text[])
)
"""

# Appended to the RETURNING list of every statement that changes a job's state or
# progress: one JOB_CHANGED notification per changed job, delivered at commit, so
# long polls answer at once. Off (NULL) when the store's notify setting is off.
NOTIFY_CHANGED = "CASE WHEN %(notify)s THEN pg_notify('jobq_job_changes', j.id::text) END AS notified"

# -- claim_jobs --
# Invariant 1: FOR UPDATE SKIP LOCKED hands each due row to exactly one claimer
# and never makes a claimer wait. The LIMIT stays inside the CTE so the planner
# locks no more rows than asked. attempts + 1 and the lease are set in the same
# statement, so the fencing token (lease_owner, attempts) is born with the claim.
# Invariant 2: the lease expiry comes from the database clock.
# Reads only ix_jobs_claimable (queued rows), never history.
CLAIM_JOBS = """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
picked AS (
    SELECT id
    FROM jobs
    WHERE state = 'queued'
      AND queue = ANY(%(queues)s::text[])
      AND run_after <= (SELECT ts FROM n)
      AND (%(kinds)s::text[] IS NULL OR kind = ANY(%(kinds)s::text[]))
    ORDER BY priority DESC, run_after, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE jobs AS j
    SET state = 'running',
        attempts = j.attempts + 1,
        claims = j.claims + 1,
        lease_owner = %(worker)s,
        lease_expires_at = n.ts + make_interval(secs => %(lease_seconds)s),
        started_at = n.ts,
        updated_at = n.ts
    FROM picked, n
    WHERE j.id = picked.id
    RETURNING j.id, j.kind, j.queue, j.tenant, j.payload, j.checkpoint, j.done, j.total,
              j.attempts, j.claims, j.max_attempts, j.lease_expires_at, j.run_after, n.ts AS started_at, """ + NOTIFY_CHANGED + """
),
opened AS (
    -- Invariant 3: every attempt has its row from the moment it starts.
    INSERT INTO job_attempts (job_id, claim, attempt, worker, due_at, started_at)
    SELECT id, claims, attempts, %(worker)s, run_after, started_at FROM claimed
)
SELECT * FROM claimed ORDER BY id
"""

# -- claim_jobs (one queue) --
# CLAIM_JOBS for a worker of one queue, the common case. ``queue = ANY(array)``
# cannot use the order of ix_jobs_claimable, so the planner sorts every queued
# row of the queue before it takes the first N: a claim whose cost grows with the
# queue's depth. With ``queue = value`` the index scan comes out in claim order and
# stops after N rows it could lock: the cost of a claim is N rows, however deep the queue.
CLAIM_JOBS_ONE_QUEUE = CLAIM_JOBS.replace("queue = ANY(%(queues)s::text[])", "queue = %(queue)s")

# -- renew_lease --
# Invariant 1: fenced on the token; a reaped or reclaimed job matches no row, and
# the caller learns it lost the lease. Heartbeat and progress are one statement,
# so a job's progress is never fresher than its lease. No indexed column is
# written, so this is a HOT update.
RENEW_LEASE = """
UPDATE jobs AS j
SET lease_expires_at = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(lease_seconds)s),
    done = coalesce(%(done)s, done),
    total = coalesce(%(total)s, total),
    checkpoint = coalesce(%(checkpoint)s::jsonb, checkpoint),
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(job_id)s AND claims = %(claim)s AND attempts = %(attempt)s AND lease_owner = %(owner)s
  AND state = 'running'
RETURNING cancel_requested,
          CASE WHEN %(notify)s AND %(done)s::int IS NOT NULL
               THEN pg_notify('jobq_job_changes', j.id::text) END AS notified
"""

# -- complete_jobs --
# Invariant 1: a result is stored only for a token that still holds its job; each
# job, its result row and its attempt row change together or not at all. Many
# jobs in one statement (arrays unnested), so a busy worker finishes a batch in
# one round trip; a lost lease in the batch affects only its own row.
# The fenced rows are found (and locked, in the id order the caller sorted the
# input in) one primary-key lookup per input row, through LATERAL: joined as a
# set, the planner may instead read every entry of ix_jobs_running — which
# holds an entry for each job that ran since the last vacuum — to finish 25 jobs.
# The batch is one JSON parameter, not six arrays: its row estimate does not
# depend on the batch's size, so PostgreSQL settles on one generic plan for the
# prepared statement. With arrays, a custom plan that knows a small batch's
# length always looked cheaper, and every batch was planned again (~0.6 ms).
COMPLETE_JOBS = """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
input AS (
    SELECT *
    FROM jsonb_to_recordset(%(batch)s::jsonb)
         AS i(job_id uuid, claim int, attempt int, owner text, result_id uuid, body text,
              done int, total int)
),
held AS (
    -- Each row is locked through its primary key alone (OFFSET 0 keeps the fence from being
    -- pushed inside), then the token is checked on the row as locked, its newest version.
    -- With the fence inside, a generic plan reads ix_jobs_running (state = 'running'),
    -- dead entries and all, for every job of the batch.
    SELECT i.*
    FROM input AS i
    CROSS JOIN LATERAL (
        SELECT j.claims, j.attempts, j.lease_owner, j.state
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
        lease_expires_at = NULL,
        finished_at = n.ts,
        updated_at = n.ts
    FROM held AS i, n
    WHERE j.id = i.job_id
    RETURNING j.id, i.claim, i.result_id, i.body, """ + NOTIFY_CHANGED + """
),
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
SELECT id FROM finished
"""

# -- fail_job --
# Invariant 1: fenced like COMPLETE_JOBS. Invariant 3: the error is stored on the
# job and on its attempt. The caller brings the retry decision (service.retry):
# %(retry)s queues the job again, due %(delay)s seconds from now; otherwise it
# fails. A job whose cancellation was requested ends cancelled either way.
FAIL_JOB = """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
decision AS (
    SELECT id,
           CASE WHEN cancel_requested THEN 'cancelled'
                WHEN %(retry)s THEN 'queued'
                ELSE 'failed' END AS next_state
    FROM jobs
    WHERE id = %(job_id)s
),
changed AS (
    UPDATE jobs AS j
    SET state = d.next_state,
        error = %(error)s,
        error_group = %(error_group)s,
        run_after = CASE WHEN d.next_state = 'queued'
                         THEN n.ts + make_interval(secs => %(delay)s) ELSE j.run_after END,
        lease_owner = CASE WHEN d.next_state = 'queued' THEN NULL ELSE j.lease_owner END,
        lease_expires_at = NULL,
        finished_at = CASE WHEN d.next_state = 'queued' THEN NULL ELSE n.ts END,
        updated_at = n.ts
    FROM decision AS d, n
    WHERE j.id = d.id AND j.claims = %(claim)s AND j.attempts = %(attempt)s AND j.lease_owner = %(owner)s
      AND j.state = 'running'
    RETURNING j.id, j.state, j.run_after, """ + NOTIFY_CHANGED + """
),
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'failed', error = %(error)s
    FROM changed, n
    WHERE a.job_id = changed.id AND a.claim = %(claim)s AND a.finished_at IS NULL
)
SELECT state, run_after FROM changed
"""

# -- release_job --
# Graceful shutdown hands a job back at once. The attempt is not charged
# (attempts - 1): a deploy is not the job's fault, and the claims counter keeps
# the old token from ever matching again. Idle workers are woken (JOBS_QUEUED),
# so the job moves on without waiting for a poll. A job whose cancellation was
# requested is not handed back but ends cancelled, as fail and reap do.
RELEASE_JOB = """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
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
    WHERE j.id = %(job_id)s AND j.claims = %(claim)s AND j.attempts = %(attempt)s
      AND j.lease_owner = %(owner)s
      AND j.state = 'running'
    RETURNING j.id, j.state, """ + NOTIFY_CHANGED + """,
              CASE WHEN %(notify)s AND j.state = 'queued' THEN pg_notify('jobq_jobs', j.queue) END AS woke
),
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts,
        outcome = CASE WHEN released.state = 'cancelled' THEN 'cancelled' ELSE 'released' END
    FROM released, n
    WHERE a.job_id = released.id AND a.claim = %(claim)s AND a.finished_at IS NULL
)
SELECT count(*) AS released FROM released
"""

# -- acknowledge_cancel --
# The worker saw cancel_requested on a heartbeat and stopped: fenced like the rest.
ACKNOWLEDGE_CANCEL = """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
stopped AS (
    UPDATE jobs AS j
    SET state = 'cancelled', lease_expires_at = NULL, finished_at = n.ts, updated_at = n.ts
    FROM n
    WHERE j.id = %(job_id)s AND j.claims = %(claim)s AND j.attempts = %(attempt)s
      AND j.lease_owner = %(owner)s
      AND j.state = 'running'
    RETURNING j.id, """ + NOTIFY_CHANGED + """
),
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'cancelled'
    FROM stopped, n
    WHERE a.job_id = stopped.id AND a.claim = %(claim)s AND a.finished_at IS NULL
)
SELECT count(*) AS stopped FROM stopped
"""

# -- read_attempt_receipt --
# After a finish whose commit outcome is unknown (connection lost), the attempt's
# own row says whether our write landed: the outcome we wrote is the receipt.
READ_ATTEMPT_RECEIPT = """
SELECT a.outcome, j.state, j.run_after
FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
WHERE a.job_id = %(job_id)s AND a.claim = %(claim)s AND a.worker = %(owner)s
"""

# -- reap_expired --
# Invariant 2: a running job past its lease is reclaimed. Leaderless and
# idempotent: SKIP LOCKED lets every worker run it at once without waiting or
# double-reaping, rows lock in id order, and a batch is bounded. Attempts were
# charged at claim, so a job that kills its worker every time fails after
# max_attempts with an error that says the lease expired (invariant 3).
# Expiry is compared with the database clock, never a worker's. An expired
# lease is a retryable failure: while attempts remain (the retry budget, as in
# service.retry.decide) the job is due after %(delays)s[attempts], the delays the
# caller drew for each attempt number; the backoff itself is decided in Python.
REAP_EXPIRED = """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
expired AS (
    SELECT j.id, j.attempts, j.max_attempts, j.lease_owner, j.cancel_requested,
           (SELECT count(*) FROM job_attempts AS a
            WHERE a.job_id = j.id AND a.outcome = 'lease_expired') + 1 AS expiries
    FROM jobs AS j
    WHERE j.state = 'running' AND j.lease_expires_at < (SELECT ts FROM n)
    ORDER BY j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
reaped AS (
    UPDATE jobs AS j
    SET state = CASE WHEN e.cancel_requested THEN 'cancelled'
                     WHEN e.attempts < e.max_attempts THEN 'queued'
                     ELSE 'failed' END,
        error = CASE WHEN e.cancel_requested THEN j.error
                     ELSE 'lease expired ' || e.expiries || ' time(s); last on attempt '
                          || e.attempts || ' of ' || e.max_attempts
                          || ' (worker ' || e.lease_owner
                          || ' stopped heartbeating: crashed, killed or cut off)' END,
        error_group = CASE WHEN e.cancel_requested THEN j.error_group ELSE %(lease_expired)s END,
        run_after = CASE WHEN NOT e.cancel_requested AND e.attempts < e.max_attempts
                         THEN n.ts + make_interval(secs => (%(delays)s::float8[])[e.attempts])
                         ELSE j.run_after END,
        lease_owner = CASE WHEN NOT e.cancel_requested AND e.attempts < e.max_attempts
                           THEN NULL ELSE j.lease_owner END,
        lease_expires_at = NULL,
        finished_at = CASE WHEN NOT e.cancel_requested AND e.attempts < e.max_attempts
                           THEN NULL ELSE n.ts END,
        updated_at = n.ts
    FROM expired AS e, n
    WHERE j.id = e.id
    RETURNING j.id, j.state, j.claims, """ + NOTIFY_CHANGED + """
),
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'lease_expired', error = 'lease expired'
    FROM reaped AS r, n
    WHERE a.job_id = r.id AND a.claim = r.claims AND a.finished_at IS NULL
)
SELECT state, count(*) AS jobs FROM reaped GROUP BY state
"""

# -- cancel_job --
# A queued job is cancelled at once; a running one is asked to stop and its
# worker sees cancel_requested on its next heartbeat. Terminal jobs match nothing.
CANCEL_JOB = """
UPDATE jobs AS j
SET state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
    cancel_requested = (state = 'running'),
    finished_at = CASE WHEN state = 'queued' THEN coalesce(%(now)s::timestamptz, now()) ELSE finished_at END,
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(job_id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND state IN ('queued', 'running')
RETURNING """ + STATUS_COLUMNS + ", " + NOTIFY_CHANGED

# -- replay_jobs --
# Invariant 5: a terminal job changes only through replay, and each replay is
# recorded in job_replays with who asked and what the job was before.
REPLAY_JOBS = """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
picked AS (
    SELECT id, state, error, attempts
    FROM jobs
    WHERE state = ANY(%(states)s::text[])
      AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
      AND (cardinality(%(ids)s::uuid[]) = 0 OR id = ANY(%(ids)s::uuid[]))
      AND (%(kind)s::text IS NULL OR kind = %(kind)s)
      AND (%(error_like)s::text IS NULL OR error ILIKE %(error_like)s)
      AND (%(since)s::timestamptz IS NULL OR finished_at >= %(since)s::timestamptz)
    ORDER BY id
    FOR UPDATE SKIP LOCKED
),
replayed AS (
    UPDATE jobs AS j
    SET state = 'queued', attempts = 0, error = NULL, error_group = NULL, cancel_requested = false,
        lease_owner = NULL, lease_expires_at = NULL, run_after = n.ts, finished_at = NULL,
        updated_at = n.ts
    FROM picked, n
    WHERE j.id = picked.id
    RETURNING j.id, """ + NOTIFY_CHANGED + """
),
recorded AS (
    INSERT INTO job_replays (job_id, replayed_at, replayed_by, previous_state, previous_error,
                             previous_attempts)
    SELECT picked.id, n.ts, %(by)s, picked.state, picked.error, picked.attempts FROM picked, n
)
SELECT id FROM replayed ORDER BY id
"""
