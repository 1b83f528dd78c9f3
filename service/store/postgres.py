"""The PostgreSQL store: psycopg 3, a small pool, SKIP LOCKED claims, LISTEN/NOTIFY.

Every hot-path statement is a named constant below with the invariant it keeps.
Each is a single statement (data-modifying CTEs), so claim, heartbeat, complete,
fail and reap are one round trip each and never hold a transaction open while a
handler runs. ``%(now)s`` is NULL in production, so ``coalesce`` picks the
database clock; tests pass a pinned instant instead.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql
from psycopg.pq import ExecStatus
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from service.errors import (
    InvalidInput,
    InvalidTransition,
    JobNotFound,
    LeaseLost,
    StoreUnavailable,
    TokenNotFound,
    Unauthorized,
)
from service.jobs import (
    JSON,
    LEASE_EXPIRED_GROUP,
    ActiveCount,
    ApiToken,
    AttemptOutcome,
    ClaimedJob,
    Completion,
    FailResult,
    FailureGroup,
    Heartbeat,
    JobPage,
    JobQuery,
    JobState,
    JobStatus,
    KindOutcomes,
    Lease,
    NewJob,
    Notification,
    QueueStats,
    ReapResult,
    ReplayFilter,
    StatusRead,
    WorkerInfo,
    error_group,
    new_job_id,
    queued_status,
    storable_json,
    validate_new_job,
)
from service.retry import RetryPolicy
from service.store.base import PRUNE_BATCH, REAP_BATCH, Clock, DatabaseHealth, Listener
from service.store.encoding import (
    bucket_counts,
    check_lease_seconds,
    check_page_size,
    check_progress,
    dump_batch,
    dump_json,
    storable_error,
    substring_pattern,
)
from service.store.rows import Readers, api_token, claimed_job, job_status, worker_info

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
# job and on its attempt. A retry goes back to queued with a jittered run_after
# (the delay comes from service.retry); spent attempts or a permanent error fail
# the job; a job whose cancellation was requested ends cancelled instead.
FAIL_JOB = """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
decision AS (
    SELECT id,
           CASE WHEN cancel_requested THEN 'cancelled'
                WHEN %(retryable)s AND attempts < max_attempts THEN 'queued'
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
# Expiry is compared with the database clock, never a worker's.
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
                         THEN n.ts + make_interval(secs => random() * least(
                              %(retry_cap)s, %(retry_base)s * power(2, e.attempts - 1)))
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

GET_JOB = """
SELECT """ + STATUS_COLUMNS + """
FROM jobs
WHERE id = %(job_id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
"""

# The result body is read only here, by its own request, never by a status poll.
GET_RESULT = """
SELECT j.state, r.body
FROM jobs AS j LEFT JOIN job_results AS r ON r.id = j.result_id
WHERE j.id = %(job_id)s AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s)
"""

# The payload alone, by primary key: only a submit that repeats an Idempotency-Key reads it.
GET_PAYLOAD = """
SELECT payload FROM jobs
WHERE id = %(job_id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
"""

# Keyset pagination on the time-ordered id through ix_jobs_tenant_id.
LIST_JOBS = """
SELECT """ + STATUS_COLUMNS + """
FROM jobs
WHERE tenant = %(tenant)s
  AND (%(state)s::text IS NULL OR state = %(state)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(created_after)s::timestamptz IS NULL OR created_at > %(created_after)s::timestamptz)
  AND (%(after_id)s::uuid IS NULL OR id < %(after_id)s::uuid)
ORDER BY id DESC
LIMIT %(limit)s
"""

# -- failure_groups --
# One query for the dead-letter view: failed jobs in a window of ix_jobs_finished_at,
# grouped by kind and the normalised error prefix written at failure time.
FAILURE_GROUPS = """
SELECT kind, error_group, count(*) AS count, min(finished_at) AS first_seen,
       max(finished_at) AS last_seen, max(id::text)::uuid AS example_job_id
FROM jobs
WHERE finished_at >= %(since)s::timestamptz
  AND state = 'failed'
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
GROUP BY kind, error_group
ORDER BY count DESC, last_seen DESC
"""

# Final outcomes per kind within a window, for failure ratios and alerts.
OUTCOMES = """
SELECT kind,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'failed') AS failed
FROM jobs
WHERE finished_at >= coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
GROUP BY kind
ORDER BY kind
"""

LEASE_EXPIRIES = """
SELECT count(*) AS expiries
FROM job_attempts
WHERE finished_at >= coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)
  AND outcome = 'lease_expired'
"""

DURATION_BUCKETS = """
SELECT kind,
       width_bucket(extract(epoch FROM finished_at - started_at)::float8, %(bounds)s::float8[]) AS bucket,
       count(*) AS count
FROM jobs
WHERE finished_at >= coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)
  AND state IN ('succeeded', 'failed') AND started_at IS NOT NULL
GROUP BY kind, bucket
"""

PICKUP_BUCKETS = """
SELECT j.kind,
       width_bucket(extract(epoch FROM a.started_at - a.due_at)::float8, %(bounds)s::float8[]) AS bucket,
       count(*) AS count
FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
WHERE a.finished_at >= coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)
GROUP BY j.kind, bucket
"""

# Active rows only (the two partial indexes), never history.
QUEUE_STATS = """
SELECT queue,
       count(*) FILTER (WHERE state = 'queued') AS queued,
       count(*) FILTER (WHERE state = 'running') AS running,
       extract(epoch FROM coalesce(%(now)s::timestamptz, now())
               - min(run_after) FILTER (WHERE state = 'queued'
                                          AND run_after <= coalesce(%(now)s::timestamptz, now()))
       )::float8 AS oldest_queued_age_seconds
FROM jobs
WHERE state IN ('queued', 'running')
GROUP BY queue
ORDER BY queue
"""

ACTIVE_COUNTS = """
SELECT queue, kind, state, count(*) AS count
FROM jobs
WHERE state IN ('queued', 'running')
GROUP BY queue, kind, state
ORDER BY queue, kind, state
"""

# -- prune_finished --
# Retention: terminal jobs finished before the cutoff, oldest first, a small batch
# at a time; attempts, results and replays go with them (ON DELETE CASCADE).
# SKIP LOCKED: pruning never waits on, or blocks, anything a worker holds.
PRUNE_FINISHED = """
WITH doomed AS (
    SELECT id
    FROM jobs
    WHERE finished_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(older_than)s)
      AND state IN ('succeeded', 'failed', 'cancelled')
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM jobs USING doomed WHERE jobs.id = doomed.id
"""

COUNT_PRUNABLE = """
SELECT count(*) AS count
FROM jobs
WHERE finished_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(older_than)s)
  AND state IN ('succeeded', 'failed', 'cancelled')
"""

# -- health_stats --
# For metrics (FAILURE-MODES.md, bloat): the statistics views only, never a table.
# Dead tuples come from the cumulative statistics, which lag by a second or so.
# The oldest transaction: any other client of this database holding one open
# ("idle in transaction" included), which holds back what vacuum may remove.
# Other roles' sessions show their xact_start only to pg_read_all_stats members.
# The real clock, not a pinned one: xact_start is real time.
HEALTH_STATS = """
SELECT (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = to_regclass('jobs')) AS jobs_dead_tuples,
       coalesce((SELECT greatest(0, extract(epoch FROM clock_timestamp() - min(xact_start)))::float8
                 FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND backend_type = 'client backend' AND xact_start IS NOT NULL), 0) AS oldest_transaction_age_seconds
"""

# -- workers --
REGISTER_WORKER = """
INSERT INTO workers (id, host, pid, queues, kinds, concurrency, started_at, last_seen_at)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s::jsonb, %(kinds)s::jsonb, %(concurrency)s,
        coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at
"""

TOUCH_WORKER = """
UPDATE workers SET last_seen_at = coalesce(%(now)s::timestamptz, now()) WHERE id = %(id)s
"""

DEREGISTER_WORKER = "DELETE FROM workers WHERE id = %(id)s"

LIST_WORKERS = """
SELECT id, host, pid, queues, kinds, concurrency, started_at, last_seen_at
FROM workers
WHERE %(within)s::float8 IS NULL
   OR last_seen_at > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(within)s::float8)
ORDER BY started_at DESC, id
"""

# -- api tokens --
CREATE_TOKEN = """
INSERT INTO api_tokens (id, tenant, name, token_hash, created_at)
VALUES (%(id)s, %(tenant)s, %(name)s, %(token_hash)s, coalesce(%(now)s::timestamptz, now()))
RETURNING id, tenant, name, created_at, revoked_at
"""

TENANT_FOR_TOKEN = """
SELECT tenant FROM api_tokens WHERE token_hash = %(token_hash)s AND revoked_at IS NULL
"""

# -- get_job_for_token --
# A status poll is one query, not a token lookup and then a read: the token
# (unique index on its hash) and the job (primary key) together. No row: the
# token is unknown or revoked; a row whose job columns are NULL: no such job for
# that tenant.
GET_JOB_FOR_TOKEN = """
SELECT t.tenant AS token_tenant, s.*
FROM api_tokens AS t
LEFT JOIN LATERAL (
    SELECT """ + STATUS_COLUMNS + """
    FROM jobs
    WHERE id = %(job_id)s AND tenant = t.tenant
) AS s ON true
WHERE t.token_hash = %(token_hash)s AND t.revoked_at IS NULL
"""

# -- read_statuses --
# Many status polls in one read (the API coalesces concurrent ones): each asked job
# by primary key, only within the tenant given or the one its token names, so
# another tenant's job, an unknown token and a revoked one all read as missing.
# `ord` keeps the answers in the order asked.
READ_STATUSES = """
SELECT q.ord, s.*
FROM unnest(%(ids)s::uuid[], %(tenants)s::text[], %(token_hashes)s::text[])
     WITH ORDINALITY AS q(job_id, tenant, token_hash, ord)
LEFT JOIN api_tokens AS t ON t.token_hash = q.token_hash AND t.revoked_at IS NULL
JOIN LATERAL (
    SELECT """ + STATUS_COLUMNS + """
    FROM jobs
    WHERE id = q.job_id AND tenant = coalesce(t.tenant, q.tenant)
) AS s ON true
"""

REVOKE_TOKEN = """
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, coalesce(%(now)s::timestamptz, now()))
WHERE id = %(id)s
RETURNING id, tenant, name, created_at, revoked_at
"""

LIST_TOKENS = """
SELECT id, tenant, name, created_at, revoked_at FROM api_tokens
WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s
ORDER BY created_at, id
"""

_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock
_RETRIES = 5
T = TypeVar("T")


class PostgresStore:
    """The queue on PostgreSQL. Holds a bounded pool; uses a connection only per statement."""

    def __init__(
        self,
        database_url: str,
        *,
        pool_size: int = 2,
        notify: bool = True,
        retry_policy: RetryPolicy | None = None,
        clock: Clock | None = None,
        pool_timeout: float = 10.0,
    ) -> None:
        self.database_url = database_url
        self.notify = notify
        self.retry_policy = retry_policy or RetryPolicy()
        self._clock = clock
        self._pool = ConnectionPool(
            database_url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "row_factory": dict_row, **connection_defaults(database_url)},
            timeout=pool_timeout,
            open=True,
            name="jobq",
        )

    # -- plumbing -------------------------------------------------------------------
    def _params(self, **values: Any) -> dict[str, Any]:
        values["now"] = self._clock() if self._clock else None
        values["notify"] = self.notify
        return values

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        with _translate():
            try:
                with self._pool.connection() as conn:
                    yield conn
            except PoolTimeout as exc:
                raise StoreUnavailable(f"no PostgreSQL connection: {self._why_unreachable()}") from exc

    def _why_unreachable(self) -> str:
        """The pool only says it timed out; one direct attempt tells the reason (refused, no such database…)."""
        try:
            with psycopg.connect(self.database_url, **connection_defaults(self.database_url)):
                return "every pooled connection is busy"
        except psycopg.Error as exc:
            return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__

    def _retrying(self, operation: Callable[[], T]) -> T:
        """Retry deadlocks and serialization failures with jitter; nothing else."""
        for attempt in range(_RETRIES):
            try:
                return operation()
            except _Retryable as exc:
                if attempt == _RETRIES - 1:
                    raise StoreUnavailable(f"gave up after {_RETRIES} tries: {exc}") from exc
                time.sleep(random.uniform(0, 0.01 * 2**attempt))
        raise AssertionError("unreachable")

    def _fetchall(self, statement: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        def run() -> list[dict[str, Any]]:
            with self._connection() as conn:
                cursor = conn.execute(statement, params)
                # Asked of the result's status: cursor.description builds a Column per column each time.
                result = cursor.pgresult
                return cursor.fetchall() if result is not None and result.status == ExecStatus.TUPLES_OK else []

        return self._retrying(run)

    def _fetchone(self, statement: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        rows = self._fetchall(statement, params)
        return rows[0] if rows else None

    def close(self) -> None:
        self._pool.close()

    # -- the dead-letter path, rates and retention ------------------------------------
    def failure_groups(
        self, since: datetime, kind: str | None = None, tenant: str | None = None
    ) -> list[FailureGroup]:
        rows = self._fetchall(FAILURE_GROUPS, self._params(since=since, kind=kind, tenant=tenant))
        return [FailureGroup(**row) for row in rows]

    def outcomes(self, window_seconds: float, kind: str | None = None) -> list[KindOutcomes]:
        rows = self._fetchall(OUTCOMES, self._params(window=float(window_seconds), kind=kind))
        return [KindOutcomes(**row) for row in rows]

    def lease_expiries(self, window_seconds: float) -> int:
        row = self._fetchone(LEASE_EXPIRIES, self._params(window=float(window_seconds)))
        return int(row["expiries"]) if row else 0

    def duration_buckets(self, window_seconds: float, bounds: Sequence[float]) -> dict[str, list[int]]:
        return self._buckets(DURATION_BUCKETS, window_seconds, bounds)

    def pickup_buckets(self, window_seconds: float, bounds: Sequence[float]) -> dict[str, list[int]]:
        return self._buckets(PICKUP_BUCKETS, window_seconds, bounds)

    def _buckets(self, statement: str, window_seconds: float, bounds: Sequence[float]) -> dict[str, list[int]]:
        rows = self._fetchall(
            statement, self._params(window=float(window_seconds), bounds=[float(b) for b in bounds])
        )
        return bucket_counts(rows, len(bounds))

    def queue_stats(self) -> list[QueueStats]:
        return [QueueStats(**row) for row in self._fetchall(QUEUE_STATS, self._params())]

    def active_counts(self) -> list[ActiveCount]:
        rows = self._fetchall(ACTIVE_COUNTS, self._params())
        return [ActiveCount(row["queue"], row["kind"], JobState(row["state"]), row["count"]) for row in rows]

    def prune(self, older_than_seconds: float, limit: int = PRUNE_BATCH) -> int:
        params = self._params(older_than=float(older_than_seconds), limit=limit)

        def run() -> int:
            with self._connection() as conn:
                return conn.execute(PRUNE_FINISHED, params).rowcount

        return self._retrying(run)

    def count_prunable(self, older_than_seconds: float) -> int:
        row = self._fetchone(COUNT_PRUNABLE, self._params(older_than=float(older_than_seconds)))
        return int(row["count"]) if row else 0

    def health_stats(self) -> DatabaseHealth:
        row = self._fetchone(HEALTH_STATS, {})
        if row is None:
            return DatabaseHealth(jobs_dead_tuples=None, oldest_transaction_age_seconds=None)
        dead = row["jobs_dead_tuples"]
        return DatabaseHealth(
            jobs_dead_tuples=int(dead) if dead is not None else None,
            oldest_transaction_age_seconds=float(row["oldest_transaction_age_seconds"]),
        )

    # -- wake-ups -------------------------------------------------------------------
    def listen(self, channels: Sequence[str]) -> Listener:
        return PostgresListener(self.database_url, channels)

    # -- workers ----------------------------------------------------------------------
    def register_worker(self, worker: WorkerInfo) -> None:
        self._fetchall(
            REGISTER_WORKER,
            self._params(
                id=worker.id,
                host=worker.host,
                pid=worker.pid,
                queues=json.dumps(list(worker.queues)),
                kinds=json.dumps(list(worker.kinds)),
                concurrency=worker.concurrency,
            ),
        )

    def touch_worker(self, worker_id: str) -> None:
        self._fetchall(TOUCH_WORKER, self._params(id=worker_id))

    def deregister_worker(self, worker_id: str) -> None:
        self._fetchall(DEREGISTER_WORKER, self._params(id=worker_id))

    def list_workers(self, seen_within_seconds: float | None = None) -> list[WorkerInfo]:
        rows = self._fetchall(LIST_WORKERS, self._params(within=seen_within_seconds))
        return [
            worker_info(row, _READ)
            for row in rows
        ]

    # -- API tokens -------------------------------------------------------------------
    def create_token(self, tenant: str, token_hash: str, name: str | None = None) -> ApiToken:
        if not tenant or not token_hash:
            raise InvalidInput("a token needs a tenant and a hash")
        row = self._fetchone(
            CREATE_TOKEN, self._params(id=new_job_id(), tenant=tenant, name=name, token_hash=token_hash)
        )
        assert row is not None  # INSERT … RETURNING always returns the row
        return api_token(row, _READ)

    def tenant_for_token(self, token_hash: str) -> str | None:
        row = self._fetchone(TENANT_FOR_TOKEN, self._params(token_hash=token_hash))
        return row["tenant"] if row else None

    def revoke_token(self, token_id: uuid.UUID) -> ApiToken:
        row = self._fetchone(REVOKE_TOKEN, self._params(id=token_id))
        if row is None:
            raise TokenNotFound(token_id)
        return api_token(row, _READ)

    def list_tokens(self, tenant: str | None = None) -> list[ApiToken]:
        return [api_token(row, _READ) for row in self._fetchall(LIST_TOKENS, self._params(tenant=tenant))]

    # -- submitting -----------------------------------------------------------------
    def enqueue(self, job: NewJob) -> JobStatus:
        return self.enqueue_many([job])[0]

    def enqueue_many(self, jobs: Sequence[NewJob]) -> list[JobStatus]:
        if not jobs:
            return []
        for job in jobs:
            validate_new_job(job)
            storable_json(job.payload, "payload")
        ids = [new_job_id() for _ in jobs]
        batch = [
            {
                "id": str(job_id),
                "tenant": job.tenant,
                "queue": job.queue,
                "kind": job.kind,
                "payload": job.payload,
                "priority": job.priority,
                "max_attempts": job.max_attempts,
                "delay": job.delay_seconds,
                "run_after": job.run_after.isoformat() if job.run_after is not None else None,
                "total": job.total,
                "concurrency_key": job.concurrency_key,
                "idempotency_key": job.idempotency_key,
            }
            for job_id, job in zip(ids, jobs, strict=True)
        ]
        params = self._params(batch=dump_batch(batch, [job.payload for job in jobs], "payload"),
                              wake_queues=",".join(sorted({j.queue for j in jobs})))
        # One autocommit statement inserts and wakes the workers. Only when an idempotency
        # key was taken does a second one read the existing jobs (committed by then: the
        # insert waited for any transaction that held the key).
        inserted = {row["id"]: row for row in self._fetchall(ENQUEUE_JOBS, params)}
        existing: dict[tuple[str, str], JobStatus] = {}
        if len(inserted) < len(jobs):
            keyed = [j for j in jobs if j.idempotency_key is not None]
            rows = self._fetchall(
                READ_BY_IDEMPOTENCY_KEYS,
                self._params(tenants=[j.tenant for j in keyed], keys=[j.idempotency_key for j in keyed]),
            )
            existing = {(row["tenant"], row["idempotency_key"]): _status(row) for row in rows}
        statuses = []
        for job_id, job in zip(ids, jobs, strict=True):
            row = inserted.get(job_id)
            if row is None:
                statuses.append(existing[(job.tenant, job.idempotency_key)])  # type: ignore[index]
            else:
                statuses.append(queued_status(job, job_id, run_after=row["run_after"], created_at=row["created_at"]))
        return statuses

    # -- the worker's hot path ------------------------------------------------------
    def claim(
        self,
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        kinds: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        if limit < 1:
            raise InvalidInput("claim limit must be at least 1")
        if not worker:
            raise InvalidInput("worker must be a non-empty string")
        check_lease_seconds(lease_seconds)
        queues = list(queues)
        rows = self._fetchall(
            CLAIM_JOBS_ONE_QUEUE if len(queues) == 1 else CLAIM_JOBS,
            self._params(
                worker=worker,
                queue=queues[0] if len(queues) == 1 else None,
                queues=queues,
                limit=limit,
                lease_seconds=float(lease_seconds),
                kinds=list(kinds) if kinds is not None else None,
            ),
        )
        return [claimed_job(row, worker, _READ) for row in rows]

    def heartbeat(
        self,
        lease: Lease,
        lease_seconds: float,
        done: int | None = None,
        total: int | None = None,
        checkpoint: JSON | None = None,
    ) -> Heartbeat:
        check_lease_seconds(lease_seconds)
        check_progress(done, total)
        row = self._fetchone(
            RENEW_LEASE,
            self._params(
                **_fence(lease),
                lease_seconds=float(lease_seconds),
                done=done,
                total=total,
                checkpoint=None if checkpoint is None else dump_json(checkpoint, "checkpoint"),
            ),
        )
        if row is None:
            return Heartbeat(held=False, cancel_requested=False)
        return Heartbeat(held=True, cancel_requested=row["cancel_requested"])

    def complete(self, lease: Lease, result: JSON, done: int | None = None, total: int | None = None) -> None:
        if self.complete_many([Completion(lease, result, done, total)]):
            raise LeaseLost(lease.job_id, lease.attempt)

    def complete_many(self, finished: Sequence[Completion]) -> list[Lease]:
        if not finished:
            return []
        for item in finished:
            check_progress(item.done, item.total)
        finished = sorted(finished, key=lambda item: item.lease.job_id)  # rows lock in id order
        batch = json.dumps([
            {
                "job_id": str(item.lease.job_id),
                "claim": item.lease.claim,
                "attempt": item.lease.attempt,
                "owner": item.lease.owner,
                "result_id": str(new_job_id()),
                "body": dump_json(item.result, "result"),  # JSON text in a JSON string: a null result stays JSON null
                "done": item.done,
                "total": item.total,
            }
            for item in finished
        ])
        rows = self._fetchall(COMPLETE_JOBS, self._params(batch=batch))
        written = {row["id"] for row in rows}
        return [
            item.lease
            for item in finished
            if item.lease.job_id not in written and self._receipt(item.lease, AttemptOutcome.SUCCEEDED) is None
        ]

    def fail(self, lease: Lease, error: str, retryable: bool) -> FailResult:
        if not isinstance(error, str) or not error.strip():
            raise InvalidInput("error must be a non-empty string")
        error = storable_error(error)
        row = self._fetchone(
            FAIL_JOB,
            self._params(
                **_fence(lease),
                error=error,
                error_group=error_group(error),
                retryable=retryable,
                delay=self.retry_policy.delay(lease.attempt),
            ),
        )
        if row is None:
            row = self._require_receipt(lease, AttemptOutcome.FAILED)
        return FailResult(state=JobState(row["state"]), run_after=row["run_after"] if row["state"] == "queued" else None)

    def release(self, lease: Lease) -> None:
        row = self._fetchone(RELEASE_JOB, self._params(**_fence(lease)))
        if row is None or row["released"] == 0:
            self._require_receipt(lease, AttemptOutcome.RELEASED, AttemptOutcome.CANCELLED)

    def acknowledge_cancel(self, lease: Lease) -> None:
        row = self._fetchone(ACKNOWLEDGE_CANCEL, self._params(**_fence(lease)))
        if row is None or row["stopped"] == 0:
            self._require_receipt(lease, AttemptOutcome.CANCELLED)

    def _receipt(self, lease: Lease, *outcomes: AttemptOutcome) -> dict[str, Any] | None:
        """The fenced write matched nothing: did it land earlier (a retried call)? Else the lease is lost."""
        row = self._fetchone(READ_ATTEMPT_RECEIPT, self._params(**_fence(lease)))
        return row if row is not None and row["outcome"] in outcomes else None

    def _require_receipt(self, lease: Lease, *outcomes: AttemptOutcome) -> dict[str, Any]:
        row = self._receipt(lease, *outcomes)
        if row is None:
            raise LeaseLost(lease.job_id, lease.attempt)
        return row

    def reap(self, limit: int = REAP_BATCH) -> ReapResult:
        rows = self._fetchall(
            REAP_EXPIRED,
            self._params(
                limit=limit,
                lease_expired=LEASE_EXPIRED_GROUP,
                retry_base=self.retry_policy.base_seconds,
                retry_cap=self.retry_policy.cap_seconds,
            ),
        )
        counts = {row["state"]: row["jobs"] for row in rows}
        return ReapResult(
            requeued=counts.get("queued", 0),
            failed=counts.get("failed", 0),
            cancelled=counts.get("cancelled", 0),
        )

    # -- operators and the API ------------------------------------------------------
    def cancel(self, job_id: uuid.UUID, tenant: str | None = None) -> JobStatus:
        row = self._fetchone(CANCEL_JOB, self._params(job_id=job_id, tenant=tenant))
        if row is not None:
            return _status(row)
        current = self.get(job_id, tenant)
        raise InvalidTransition(f"job {job_id} is already {current.state.value}", current.state.value)

    def replay(self, which: ReplayFilter, by: str, dry_run: bool = False) -> list[uuid.UUID]:
        params = self._params(**_replay_params(which), by=by)

        def run() -> list[uuid.UUID]:
            with self._connection() as conn:
                with conn.transaction(force_rollback=dry_run):
                    return [row["id"] for row in conn.execute(REPLAY_JOBS, params).fetchall()]

        return self._retrying(run)

    def get(self, job_id: uuid.UUID, tenant: str | None = None, token_hash: str | None = None) -> JobStatus:
        if token_hash is not None:
            found = self._fetchone(GET_JOB_FOR_TOKEN, self._params(job_id=job_id, token_hash=token_hash))
            if found is None:
                raise Unauthorized("unknown or revoked token")
            if found["id"] is None:
                raise JobNotFound(job_id)
            return _status(found)
        row = self._fetchone(GET_JOB, self._params(job_id=job_id, tenant=tenant))
        if row is None:
            raise JobNotFound(job_id)
        return _status(row)

    def read_statuses(self, reads: Sequence[StatusRead]) -> list[JobStatus | None]:
        if not reads:
            return []
        rows = self._fetchall(READ_STATUSES, self._params(
            ids=[r.job_id for r in reads],
            tenants=[r.tenant for r in reads],
            token_hashes=[r.token_hash for r in reads],
        ))
        found: list[JobStatus | None] = [None] * len(reads)
        for row in rows:
            found[row["ord"] - 1] = _status(row)
        return found

    def get_result(self, job_id: uuid.UUID, tenant: str | None = None) -> JSON:
        row = self._fetchone(GET_RESULT, self._params(job_id=job_id, tenant=tenant))
        if row is None:
            raise JobNotFound(job_id)
        if row["state"] != JobState.SUCCEEDED:
            raise InvalidTransition(f"job {job_id} has no result: it is {row['state']}", row["state"])
        return row["body"]

    def get_payload(self, job_id: uuid.UUID, tenant: str | None = None) -> JSON:
        row = self._fetchone(GET_PAYLOAD, self._params(job_id=job_id, tenant=tenant))
        if row is None:
            raise JobNotFound(job_id)
        return row["payload"]

    def list_jobs(self, query: JobQuery) -> JobPage:
        check_page_size(query.limit)
        rows = self._fetchall(
            LIST_JOBS,
            self._params(
                tenant=query.tenant,
                state=query.state.value if query.state else None,
                kind=query.kind,
                queue=query.queue,
                created_after=query.created_after,
                after_id=query.after_id,
                limit=query.limit + 1,
            ),
        )
        items = [_status(row) for row in rows[: query.limit]]
        more = len(rows) > query.limit
        return JobPage(items=items, next_after_id=items[-1].id if more else None)


class PostgresListener:
    """LISTEN on a dedicated connection (never a pooled one: LISTEN belongs to a session).

    Waits in short slices so that ``close`` from another thread is noticed quickly.
    When the connection drops it reconnects with jittered backoff, LISTENs again,
    and answers ``payload="*"`` on every channel: notifications sent while it was
    away are lost, so the caller must look for itself.
    """

    SLICE_SECONDS = 0.25

    def __init__(self, database_url: str, channels: Sequence[str]) -> None:
        self._url = database_url
        self._channels = list(channels)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._failures = 0
        try:
            self._connect()
        except psycopg.Error:
            self._conn = None  # the first wait() retries and then answers "*"

    def _connect(self) -> None:
        conn = psycopg.connect(self._url, autocommit=True, **connection_defaults(self._url))
        for channel in self._channels:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        self._conn = conn
        self._failures = 0

    def wait(self, timeout: float) -> list[Notification]:
        deadline = time.monotonic() + timeout
        while not self._closed.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            with self._lock:
                if self._closed.is_set():
                    return []
                if self._conn is None:
                    if self._reconnect():
                        return [Notification(channel, "*") for channel in self._channels]
                    pause = min(remaining, random.uniform(0, min(5.0, 0.1 * 2**self._failures)))
                else:
                    try:
                        received = self._receive(min(remaining, self.SLICE_SECONDS))
                    except psycopg.Error:
                        self._drop()
                        continue
                    if received:
                        return received
                    continue
            self._closed.wait(pause)
        return []

    def _receive(self, timeout: float) -> list[Notification]:
        assert self._conn is not None
        got = [Notification(n.channel, n.payload) for n in self._conn.notifies(timeout=timeout, stop_after=1)]
        if got:  # take whatever else already arrived, without waiting
            got += [Notification(n.channel, n.payload) for n in self._conn.notifies(timeout=0)]
        return got

    def _reconnect(self) -> bool:
        try:
            self._connect()
            return True
        except psycopg.Error:
            self._failures += 1
            return False

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._drop()


def connection_defaults(database_url: str) -> dict[str, Any]:
    """TCP settings that notice a dead link in seconds, not the kernel's ~15 minutes.

    Without them a statement sent into a cut network hangs until TCP gives up,
    and the worker cannot even learn that its lease is gone. Values in the URL win.
    """
    defaults: dict[str, Any] = {
        "connect_timeout": 10,
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": 30_000,  # milliseconds unacknowledged data may wait
    }
    given = conninfo_to_dict(database_url)
    return {key: value for key, value in defaults.items() if key not in given}


def _fence(lease: Lease) -> dict[str, Any]:
    return {"job_id": lease.job_id, "claim": lease.claim, "attempt": lease.attempt, "owner": lease.owner}


def _replay_params(which: ReplayFilter) -> dict[str, Any]:
    states = ["failed", "cancelled"] if which.include_cancelled or which.ids else ["failed"]
    return {
        "states": states,
        "tenant": which.tenant,
        "ids": list(which.ids),
        "kind": which.kind,
        "error_like": substring_pattern(which.error_like),
        "since": which.since,
    }


# psycopg returns times, ids, arrays and JSON typed already.
_READ = Readers(time=lambda value: value, ident=lambda value: value, names=tuple, json=lambda value: value)


def _status(row: Mapping[str, Any]) -> JobStatus:
    return job_status(row, _READ)


class _Retryable(Exception):
    """A deadlock or serialization failure: the statement may simply run again."""


@contextmanager
def _translate() -> Iterator[None]:
    """The one place where psycopg's errors become jobq's."""
    try:
        yield
    except psycopg.Error as exc:
        sqlstate = getattr(exc, "sqlstate", None)
        if sqlstate in _RETRYABLE_SQLSTATES:
            raise _Retryable(str(exc)) from exc
        if isinstance(exc, pgerrors.UndefinedTable):
            raise StoreUnavailable(f"the database schema is not migrated (run jobq migrate): {exc}") from exc
        if isinstance(exc, pgerrors.CheckViolation):
            constraint = exc.diag.constraint_name or "a check constraint"
            raise InvalidInput(f"rejected by {constraint}") from exc
        if isinstance(exc, pgerrors.DataError | pgerrors.IntegrityError):
            raise InvalidInput(str(exc).splitlines()[0]) from exc
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise StoreUnavailable(f"PostgreSQL unavailable: {first_line}") from exc
        raise
