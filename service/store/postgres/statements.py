"""The PostgreSQL store's hot path: the worker's statements from claim to finish
(claim, heartbeat, complete, fail, release, cancel acknowledged), each named, with
the invariant it keeps, and the pieces they share (a slot given back, the wake-up).
The other areas keep their statements beside their operations (submit.py,
ops.py, maintenance.py, limits.py, items.py, tokens.py, workers.py), with the reads
that serve only them; the reads of the API, the CLI and the console are in queries.py.

Each is a single statement (data-modifying CTEs), so claim, heartbeat, complete,
fail and reap are one round trip each and never hold a transaction open while a
handler runs. ``%(now)s`` is NULL in production, so ``coalesce`` picks the
database clock; tests pass a pinned instant instead.
"""

from service.store.postgres.items import ITEM_DELTAS, ITEM_INPUT, STORE_ITEMS


# -- limits: shared pieces --
# The scopes a job row (alias x) is counted in: tenant, kind, queue and, when it has
# one, its concurrency key. tenant:* is never a counter of its own: it gives each
# tenant a tenant:NAME counter.
def _scopes(x: str) -> str:
    return "ARRAY['tenant:' || X.tenant, 'kind:' || X.kind, 'queue:' || X.queue, 'key:' || X.concurrency_key]".replace(
        "X.", x + "."
    )


# Free room in a scope_counters row (alias c) at n.ts: concurrency left and starts left in
# the current rate window (windows of per_seconds aligned to the epoch).
def _window(c: str) -> str:
    return "to_timestamp(floor(extract(epoch FROM n.ts) / C.per_seconds) * C.per_seconds)".replace("C.", c + ".")


def _room(c: str) -> str:
    return (
        (
            "least(coalesce(C.concurrency - C.running, 2147483647),"
            " CASE WHEN C.rate IS NULL THEN 2147483647"
            " WHEN C.window_start = WINDOW THEN C.rate - C.window_starts ELSE C.rate END)"
        )
        .replace("WINDOW", _window(c))
        .replace("C.", c + ".")
    )


# A slot given back: every statement that ends a run (complete, fail, release, cancel
# acknowledged, reap) subtracts its ended jobs from their scopes' counters in the same
# statement, so a counter never counts a job that is no longer running. Only counters
# that exist change (scopes with a limit). Rows are taken in scope order, as the claim
# locks them, so a finish and a claim never wait on each other in a cycle.
def give_back(ended: str) -> str:
    return (
        """
freed AS (
    UPDATE scope_counters AS c
    SET running = c.running - e.jobs
    FROM (
        SELECT s.scope, count(*) AS jobs
        FROM """
        + ended
        + """ AS e CROSS JOIN LATERAL unnest("""
        + _scopes("e")
        + """) AS s(scope)
        WHERE s.scope IS NOT NULL
        GROUP BY s.scope
        ORDER BY s.scope
    ) AS e
    WHERE c.scope = e.scope
)"""
    )


# Appended to the RETURNING list of every statement that changes a job's state or
# progress: one JOB_CHANGED notification per changed job, delivered at commit, so
# long polls answer at once. Off (NULL) when the store's notify setting is off.
NOTIFY_CHANGED = "CASE WHEN %(notify)s THEN pg_notify('jobq_job_changes', j.id::text) END AS notified"

# -- claim_jobs --
# One statement, one round trip: fair across tenants, within every limit.
#
# Invariant 1: FOR UPDATE SKIP LOCKED hands each due row to exactly one claimer
# and never makes a claimer wait for a job. attempts + 1 and the lease are set in
# the same statement, so the fencing token (lease_owner, attempts) is born with the
# claim. Invariant 2: the lease expiry comes from the database clock.
#
# Fairness. ``walk`` visits the tenants with a due job in the worker's queues (and
# kinds) in name order, starting just after %(cursor)s (the last tenant this worker
# took from) and wrapping around once: one probe of ix_jobs_claimable per tenant (a
# loose index scan), never every queued row. ``tenants`` keeps the first %(visit)s of
# them that have room, each with its running jobs and weight. Each gives its next
# %(limit)s jobs in priority order (``cand``, the same index, not locked). A job's
# virtual time is (its tenant's running jobs + its place in its tenant's line) / the
# tenant's weight; the %(limit)s lowest decide each tenant's share (``shares``), ties
# in visiting order (round robin). ``picked`` then locks each tenant's share FOR
# UPDATE SKIP LOCKED down that tenant's line, so claimers at the same instant take
# different jobs rather than all but one coming back empty. So a tenant's priority
# orders only its own jobs, a tenant with fewer running jobs (per weight) goes first,
# and a lone tenant takes every free slot (work-conserving).
#
# Limits, and why no race puts a scope over its limit. Every limited scope has a
# scope_counters row whose ``running`` is exact: this statement adds what it takes,
# every statement that ends a run subtracts (give_back), and an operator's change
# recomputes it under LOCK TABLE scope_counters IN EXCLUSIVE MODE (Store.set_limit),
# which waits for every claim and finish in flight (each holds ROW EXCLUSIVE on the
# table from its start, whether or not it changes a row). Candidates whose scope looks
# full in this statement's snapshot are skipped early, but the snapshot may be stale
# under READ COMMITTED: two claimers can both see "2 of 3 running". So ``counters``
# locks the counter row of every scope of the picked jobs, in scope order (no
# deadlock between claimers), FOR UPDATE; a row changed by a claimer or finisher that
# committed after our snapshot is then read in its newest version (READ COMMITTED
# re-reads a row it waited to lock), and a second claimer waits for the first's commit.
# ``admitted`` judges the picked jobs against those locked values only: a job is
# taken when, in every one of its limited scopes, its place among the picked jobs
# of that scope is within the room left. ``counted`` then adds to the very rows
# it holds. A tenant:* limit with no counter for the tenant admits nothing (it is
# made at enqueue; missing means a bug, and a bug must idle, not overrun).
# A job picked but not admitted (its scope filled meanwhile) is simply not updated:
# its row lock ends with the statement. The placement is conservative (a job refused
# by one scope still holds its place in the others), so a race can cost a slot for
# one claim, never put a scope over its limit.
# With no limits, scope_counters is empty: each probe of it finds nothing.
#
# One plan per connection. The parameters are read through ``n`` (a CTE the planner
# cannot see into), so a plan for given values costs no less than the generic one and
# PostgreSQL keeps the generic plan after its five trial plans: planning took as long
# as running (docs/PERFORMANCE.md). A generic plan is made once, maybe on a new
# deployment's small tables, and kept as they grow; planned for small tables it read
# all of jobs to update the claimed rows (a hash join from ``admitted``) and to pick a
# tenant's share (every queued row read and sorted), so the store plans the claim with
# CLAIM_PLANNER before it in its transaction: every row it touches is then found by a key
# or in index order, whatever the tables' size or statistics. Plan tests:
# tests/store/test_claim_plan.py.
CLAIM_JOBS = (
    """
WITH RECURSIVE n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts, %(queues)s::text[] AS queues, %(kinds)s::text[] AS kinds,
           %(cursor)s::text AS cursor, %(visit)s::int AS visit, %(limit)s::int AS lim
),
q AS (
    SELECT unnest(n.queues) AS queue FROM n
),
walk(tenant, lap, first, step) AS (
    SELECT n.cursor, 0, true, 0 FROM n
    UNION ALL
    SELECT nxt.tenant, w.lap + CASE WHEN w.tenant IS NULL THEN 1 ELSE 0 END, false, w.step + 1
    FROM walk AS w
    CROSS JOIN LATERAL (
        SELECT min(h.tenant) AS tenant
        FROM q CROSS JOIN LATERAL (
            SELECT j.tenant
            FROM jobs AS j
            WHERE j.state = 'queued' AND j.queue = q.queue AND j.tenant > coalesce(w.tenant, '')
              AND j.run_after <= (SELECT ts FROM n)
              AND ((SELECT kinds FROM n) IS NULL OR j.kind = ANY((SELECT kinds FROM n)::text[]))
            ORDER BY j.tenant
            LIMIT 1
        ) AS h
    ) AS nxt
    -- one lap from the cursor to the end, then one from the start back to the cursor
    WHERE (w.tenant IS NULL AND w.lap = 0) OR (w.tenant IS NOT NULL AND (w.lap = 0 OR w.tenant < (SELECT cursor FROM n)))
),
tenants AS (
    -- scalar subqueries, not joins: the walk is then pulled only until %(visit)s tenants
    -- with room are found (a hash join would build the whole walk, one probe per tenant)
    SELECT w.tenant, w.room, w.step,
           coalesce((SELECT own.weight FROM limits AS own WHERE own.scope = 'tenant:' || w.tenant),
                    (SELECT dflt.weight FROM limits AS dflt WHERE dflt.scope = 'tenant:*'), 1.0) AS weight,
           (SELECT count(*) FROM jobs AS r WHERE r.state = 'running' AND r.tenant = w.tenant) AS running
    FROM (
        SELECT w.tenant, w.step,
               coalesce((SELECT """
    + _room("c")
    + """ FROM scope_counters AS c, n
                         WHERE c.scope = 'tenant:' || w.tenant),
                        CASE WHEN EXISTS (SELECT 1 FROM limits AS d WHERE d.scope = 'tenant:*'
                                          AND (d.concurrency IS NOT NULL OR d.rate IS NOT NULL)) THEN 0 END) AS room
        FROM walk AS w
        WHERE NOT w.first AND w.tenant IS NOT NULL AND (w.lap = 0 OR w.tenant <= (SELECT cursor FROM n))
    ) AS w
    WHERE w.room IS NULL OR w.room > 0
    LIMIT (SELECT visit FROM n)
),
cand AS (
    -- each visited tenant's next jobs, to rank (not locked: another claimer may hold some)
    SELECT c.id, c.tenant, t.step, t.weight, t.running AS tenant_running, t.room AS tenant_room,
           row_number() OVER (PARTITION BY c.tenant ORDER BY c.priority DESC, c.run_after, c.id) AS place
    FROM tenants AS t
    CROSS JOIN LATERAL (
        SELECT j.*
        FROM q CROSS JOIN LATERAL (
            -- the clock as a scalar, never a join to n: beside a long history the planner
            -- guesses the line at one row, puts n outside, and loses the index's order
            SELECT j.id, j.tenant, j.priority, j.run_after
            FROM jobs AS j
            WHERE j.state = 'queued' AND j.queue = q.queue AND j.tenant = t.tenant
              AND j.run_after <= (SELECT ts FROM n)
              AND ((SELECT kinds FROM n) IS NULL OR j.kind = ANY((SELECT kinds FROM n)::text[]))
              AND NOT EXISTS (
                  SELECT 1 FROM scope_counters AS s, n
                  WHERE s.scope IN ('kind:' || j.kind, 'queue:' || j.queue, 'key:' || j.concurrency_key)
                    AND """
    + _room("s")
    + """ <= 0)
            ORDER BY j.priority DESC, j.run_after, j.id
            LIMIT (SELECT lim FROM n)
        ) AS j
        ORDER BY j.priority DESC, j.run_after, j.id
        LIMIT (SELECT lim FROM n)
    ) AS c
),
shares AS (
    -- how many jobs each tenant gets: the lowest virtual times among all candidates
    SELECT tenant, step, count(*) AS share
    FROM (
        SELECT c.tenant, c.step
        FROM cand AS c
        WHERE c.tenant_room IS NULL OR c.place <= c.tenant_room
        ORDER BY (c.tenant_running + c.place) / c.weight, c.step, c.place
        LIMIT (SELECT lim FROM n)
    ) AS best
    GROUP BY tenant, step
),
picked AS (
    -- each tenant's share, locked: SKIP LOCKED goes down the tenant's line past rows that
    -- another claimer holds, so claimers at the same instant take different jobs
    SELECT j.id, j.tenant, j.kind, j.queue, j.concurrency_key, sh.step, j.place
    FROM shares AS sh
    CROSS JOIN LATERAL (
        SELECT j.*, row_number() OVER (ORDER BY j.priority DESC, j.run_after, j.id) AS place
        FROM q CROSS JOIN LATERAL (
            SELECT j.id, j.tenant, j.kind, j.queue, j.concurrency_key, j.priority, j.run_after
            FROM jobs AS j
            WHERE j.state = 'queued' AND j.queue = q.queue AND j.tenant = sh.tenant
              AND j.run_after <= (SELECT ts FROM n)
              AND ((SELECT kinds FROM n) IS NULL OR j.kind = ANY((SELECT kinds FROM n)::text[]))
              AND NOT EXISTS (
                  SELECT 1 FROM scope_counters AS s, n
                  WHERE s.scope IN ('kind:' || j.kind, 'queue:' || j.queue, 'key:' || j.concurrency_key)
                    AND """
    + _room("s")
    + """ <= 0)
            ORDER BY j.priority DESC, j.run_after, j.id
            LIMIT sh.share
            FOR UPDATE OF j SKIP LOCKED
        ) AS j
        ORDER BY j.priority DESC, j.run_after, j.id
        LIMIT sh.share
    ) AS j
),
scoped AS (
    SELECT p.id, p.place, p.step, s.scope
    FROM picked AS p CROSS JOIN LATERAL unnest("""
    + _scopes("p")
    + """) AS s(scope)
    WHERE s.scope IS NOT NULL
),
counters AS (
    SELECT c.scope, """
    + _room("c")
    + """ AS room
    FROM scope_counters AS c, n
    WHERE c.scope IN (SELECT scope FROM scoped)
    ORDER BY c.scope
    FOR UPDATE OF c
),
placed AS (
    SELECT s.id, s.scope,
           row_number() OVER (PARTITION BY s.scope ORDER BY s.place, s.step) AS place,
           CASE WHEN c.scope IS NOT NULL THEN c.room
                WHEN s.scope LIKE 'tenant:%%' AND EXISTS (
                    SELECT 1 FROM limits AS d WHERE d.scope = 'tenant:*'
                    AND (d.concurrency IS NOT NULL OR d.rate IS NOT NULL)) THEN 0
           END AS room
    FROM scoped AS s LEFT JOIN counters AS c ON c.scope = s.scope
),
admitted AS (
    SELECT id FROM placed GROUP BY id HAVING bool_and(room IS NULL OR place <= room)
),
claimed AS (
    UPDATE jobs AS j
    SET state = 'running',
        attempts = j.attempts + 1,
        claims = j.claims + 1,
        -- the kind's max_attempts (the claimer's handler's): the default of a job that named
        -- none, a ceiling on one that did; never below this attempt (attempts <= max_attempts)
        max_attempts = CASE WHEN %(kind_max_attempts)s::jsonb ->> j.kind IS NULL THEN j.max_attempts
                            WHEN j.max_attempts_default
                            THEN GREATEST(j.attempts + 1, (%(kind_max_attempts)s::jsonb ->> j.kind)::int)
                            ELSE GREATEST(j.attempts + 1,
                                          LEAST(j.max_attempts, (%(kind_max_attempts)s::jsonb ->> j.kind)::int))
                       END,
        lease_owner = %(worker)s,
        lease_expires_at = n.ts + make_interval(secs => %(lease_seconds)s),
        started_at = n.ts,
        updated_at = n.ts
    FROM admitted, n
    WHERE j.id = admitted.id
    RETURNING j.id, j.kind, j.queue, j.tenant, j.concurrency_key, j.payload, j.checkpoint, j.done, j.total, j.items_ok, j.items_failed,
              j.attempts, j.claims, j.max_attempts, j.lease_expires_at, j.run_after, n.ts AS started_at, """
    + NOTIFY_CHANGED
    + """
),
counted AS (
    UPDATE scope_counters AS c
    SET running = c.running + t.jobs,
        window_start = CASE WHEN c.rate IS NULL THEN c.window_start ELSE """
    + _window("c")
    + """ END,
        window_starts = CASE WHEN c.rate IS NULL THEN c.window_starts
                             WHEN c.window_start = """
    + _window("c")
    + """ THEN c.window_starts + t.jobs
                             ELSE t.jobs END
    FROM (
        SELECT s.scope, count(*) AS jobs
        FROM claimed AS cl CROSS JOIN LATERAL unnest("""
    + _scopes("cl")
    + """) AS s(scope)
        WHERE s.scope IS NOT NULL
        GROUP BY s.scope
    ) AS t, n
    WHERE c.scope = t.scope
),
opened AS (
    -- Invariant 3: every attempt has its row from the moment it starts.
    INSERT INTO job_attempts (job_id, claim, attempt, worker, due_at, started_at)
    SELECT id, claims, attempts, %(worker)s, run_after, started_at FROM claimed
)
SELECT * FROM claimed ORDER BY id
"""
)


# Invariant 1, the fence: a lease holder's write matches its job (alias j) only while the
# token it was handed (claims, attempts, lease_owner) is the job's and the job still runs.
# Every write by a worker (heartbeat, fail, release, cancel acknowledged) ends so;
# COMPLETE_JOBS checks the same on each row it locks (``held``).
FENCED = (
    "j.id = %(job_id)s AND j.claims = %(claim)s AND j.attempts = %(attempt)s AND j.lease_owner = %(owner)s"
    " AND j.state = 'running'"
)

# -- renew_lease --
# Invariant 1: fenced on the token; a reaped or reclaimed job matches no row, and
# the caller learns it lost the lease. Heartbeat and progress are one statement,
# so a job's progress is never fresher than its lease; the item outcomes recorded
# since the last heartbeat go in the same statement (data-modifying CTEs), fenced
# with it. No indexed column of jobs is written (the item counts are unindexed),
# so the update of jobs stays HOT; the items are INSERTs into job_items.
RENEW_LEASE = (
    """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
item_input AS ("""
    + ITEM_INPUT
    + """),
deltas AS ("""
    + ITEM_DELTAS
    + """),
written AS (
    UPDATE jobs AS j
    SET lease_expires_at = n.ts + make_interval(secs => %(lease_seconds)s),
        done = coalesce(%(done)s, j.done),
        total = coalesce(%(total)s, j.total),
        checkpoint = coalesce(%(checkpoint)s::jsonb, j.checkpoint),
        items_ok = j.items_ok + coalesce(d.ok, 0),
        items_failed = j.items_failed + coalesce(d.failed, 0),
        updated_at = n.ts
    FROM n LEFT JOIN deltas AS d ON true
    WHERE """
    + FENCED
    + """
    RETURNING j.id, j.attempts, n.ts, j.cancel_requested,
              CASE WHEN %(notify)s AND (%(done)s::int IS NOT NULL OR d.job_id IS NOT NULL)
                   THEN pg_notify('jobq_job_changes', j.id::text) END AS notified
),
stored AS ("""
    + STORE_ITEMS
    + """)
SELECT cancel_requested, notified FROM written
"""
)

# -- refill_lock_timeout --
# complete_and_claim's transaction first gives its finished jobs' scope slots back
# (COMPLETE_JOBS locks those counters) and then claims, which may wait for other
# counters. Two finishers, each waiting for a counter the other just gave back, would
# deadlock until deadlock_timeout (1 s) — the limited drain fell to a third of the
# unlimited one. So the refill waits at most this long; past it, the store commits the
# completion on its own and claims after it, holding nothing while it waits. Normal
# contention (another claim's few milliseconds) stays under it.
REFILL_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', '50ms', true)"

# Run in the transaction of every CLAIM_JOBS, before it. The claim keeps one generic plan
# per connection (its comment says why), planned for a row count it cannot know: LIMIT
# from a parameter is taken as a tenth of the rows. On a small analysed table that makes
# "read every queued row and sort them" look cheapest for ``cand`` and ``picked`` (a
# sequential or a bitmap scan: 990 rows read and sorted to lock one, 2.4 ms), and "hash
# every job" for finding the claimed rows again, and the plan is kept as the queue grows
# (7 ms at 1,000 queued, growing with the backlog). The claim was written for one plan:
# every read of jobs walks ix_jobs_claimable in claim order and stops at the share, and
# every set it joins (at most its limit of rows) is joined by a nested loop of key
# lookups. So that is the only plan left while it is planned, whatever the tables' size
# or statistics: no sequential or bitmap scans, no hash or merge joins. And no JIT: the
# connection asks for jit=off, but a pooler refuses that option (connection.py), and over a
# deep queue the claim's cost estimate passes jit_above_cost (~230 ms of compiling a claim
# that runs in ~2 ms, 1 M queued rows).
CLAIM_PLANNER = """
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
       set_config('jit', 'off', true)
"""

# -- complete_jobs --
# Invariant 1: a result is stored only for a token that still holds its job; each
# job, its result row and its attempt row change together or not at all. Many
# jobs in one statement (arrays unnested), so a busy worker finishes a batch in
# one round trip; a lost lease in the batch affects only its own row. The item
# outcomes recorded since the last heartbeat are written with the result.
# The fenced rows are found (and locked, in the id order the caller sorted the
# input in) one primary-key lookup per input row, through LATERAL: joined as a
# set, the planner may instead read every entry of ix_jobs_running — which
# holds an entry for each job that ran since the last vacuum — to finish 25 jobs.
# The batch is one JSON parameter, not six arrays: its row estimate does not
# depend on the batch's size, so PostgreSQL settles on one generic plan for the
# prepared statement. With arrays, a custom plan that knows a small batch's
# length always looked cheaper, and every batch was planned again (~0.6 ms).
COMPLETE_JOBS = (
    """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
input AS (
    SELECT *
    FROM jsonb_to_recordset(%(batch)s::jsonb)
         AS i(job_id uuid, claim int, attempt int, owner text, result_id uuid, body text,
              done int, total int)
),
item_input AS ("""
    + ITEM_INPUT
    + """),
deltas AS ("""
    + ITEM_DELTAS
    + """),
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
        items_ok = j.items_ok + coalesce(d.ok, 0),
        items_failed = j.items_failed + coalesce(d.failed, 0),
        lease_expires_at = NULL,
        finished_at = n.ts,
        updated_at = n.ts
    FROM held AS i LEFT JOIN deltas AS d ON d.job_id = i.job_id, n
    WHERE j.id = i.job_id
    RETURNING j.id, j.attempts, n.ts, i.claim, i.result_id, i.body, j.tenant, j.kind, j.queue, j.concurrency_key,
              """
    + NOTIFY_CHANGED
    + """
),"""
    + give_back("finished")
    + """,
written AS (
    SELECT id, attempts, ts FROM finished
),
stored_items AS ("""
    + STORE_ITEMS
    + """),
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
)

# -- fail_job --
# Invariant 1: fenced like COMPLETE_JOBS. Invariant 3: the error is stored on the
# job and on its attempt. The caller brings the retry decision (service.retry):
# %(retry)s queues the job again, due %(delay)s seconds from now; otherwise it
# fails. A job whose cancellation was requested ends cancelled either way.
FAIL_JOB = (
    """
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
    WHERE j.id = d.id AND """
    + FENCED
    + """
    RETURNING j.id, j.state, j.run_after, j.tenant, j.kind, j.queue, j.concurrency_key, """
    + NOTIFY_CHANGED
    + """
),"""
    + give_back("changed")
    + """,
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'failed', error = %(error)s
    FROM changed, n
    WHERE a.job_id = changed.id AND a.claim = %(claim)s AND a.finished_at IS NULL
)
SELECT state, run_after FROM changed
"""
)

# -- release_job --
# Graceful shutdown hands a job back at once. The attempt is not charged
# (attempts - 1): a deploy is not the job's fault, and the claims counter keeps
# the old token from ever matching again. Idle workers are woken (JOBS_QUEUED),
# so the job moves on without waiting for a poll. A job whose cancellation was
# requested is not handed back but ends cancelled, as fail and reap do.
RELEASE_JOB = (
    """
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
    WHERE """
    + FENCED
    + """
    RETURNING j.id, j.state, j.tenant, j.kind, j.queue, j.concurrency_key, """
    + NOTIFY_CHANGED
    + """,
              CASE WHEN %(notify)s AND j.state = 'queued' THEN pg_notify('jobq_jobs', j.queue) END AS woke
),"""
    + give_back("released")
    + """,
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts,
        outcome = CASE WHEN released.state = 'cancelled' THEN 'cancelled' ELSE 'released' END
    FROM released, n
    WHERE a.job_id = released.id AND a.claim = %(claim)s AND a.finished_at IS NULL
)
SELECT count(*) AS released FROM released
"""
)

# -- acknowledge_cancel --
# The worker saw cancel_requested on a heartbeat and stopped: fenced like the rest.
ACKNOWLEDGE_CANCEL = (
    """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
stopped AS (
    UPDATE jobs AS j
    SET state = 'cancelled', lease_expires_at = NULL, finished_at = n.ts, updated_at = n.ts
    FROM n
    WHERE """
    + FENCED
    + """
    RETURNING j.id, j.tenant, j.kind, j.queue, j.concurrency_key, """
    + NOTIFY_CHANGED
    + """
),"""
    + give_back("stopped")
    + """,
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'cancelled'
    FROM stopped, n
    WHERE a.job_id = stopped.id AND a.claim = %(claim)s AND a.finished_at IS NULL
)
SELECT count(*) AS stopped FROM stopped
"""
)

# -- read_attempt_receipt --
# After a finish whose commit outcome is unknown (connection lost), the attempt's
# own row says whether our write landed: the outcome we wrote is the receipt.
READ_ATTEMPT_RECEIPT = """
SELECT a.outcome, j.state, j.run_after
FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
WHERE a.job_id = %(job_id)s AND a.claim = %(claim)s AND a.worker = %(owner)s
"""
