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
    run_after, created_at, started_at, finished_at, updated_at, result_id, items_ok, items_failed,
    (state = 'running' AND lease_expires_at < coalesce(%(now)s::timestamptz, now())) AS stale
"""


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


# A tenant:* limit gives each tenant a counter of its own: made (running 0) when the
# tenant's first jobs are queued (enqueue, replay), so the claim finds one to lock.
# Nothing when no tenant:* limit counts anything. A conflict does nothing and takes no lock.
def tenant_counters(added: str) -> str:
    return (
        """
counters AS (
    INSERT INTO scope_counters (scope, concurrency, rate, per_seconds)
    SELECT DISTINCT 'tenant:' || a.tenant,
           coalesce(own.concurrency, d.concurrency), coalesce(own.rate, d.rate),
           coalesce(own.per_seconds, d.per_seconds)
    FROM """
        + added
        + """ AS a
    JOIN limits AS d ON d.scope = 'tenant:*'
    LEFT JOIN limits AS own ON own.scope = 'tenant:' || a.tenant
    WHERE coalesce(own.concurrency, d.concurrency, own.rate, d.rate) IS NOT NULL
    ON CONFLICT (scope) DO NOTHING
)"""
    )


# -- enqueue_jobs --
# Many jobs in one statement: the batch is one jsonb parameter, so psycopg dumps
# one string (not twelve arrays element by element) and the plan does not depend
# on the batch's length. A tenant's idempotency key that is already taken inserts
# nothing: the existing job is read back by READ_BY_IDEMPOTENCY_KEYS. The caller
# made the ids (time-ordered, in batch order), so one row comes back whatever the
# batch's size: the database's clock, how many rows went in, the ids that went in
# when the batch has keys (``keyed``; without keys every row goes in or none),
# and the run_after of the jobs not due at once. Everything else in a new job's
# status is what was inserted. The wake-up for idle workers rides in the same
# statement (one round trip, one commit): one JOBS_QUEUED notification per
# statement, never per row, delivered at commit; none when nothing was inserted.
ENQUEUE_JOBS = (
    """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
inserted AS (
INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                  max_attempts_default, done, total, run_after, concurrency_key, idempotency_key,
                  created_at, updated_at)
SELECT i.id, i.tenant, i.queue, i.kind, i.payload, 'queued', i.priority, 0, i.max_attempts,
       i.max_attempts_default, 0, i.total, coalesce(i.run_after, n.ts + make_interval(secs => i.delay)),
       i.concurrency_key, i.idempotency_key, n.ts, n.ts
FROM jsonb_to_recordset(%(batch)s::jsonb)
     AS i(id uuid, tenant text, queue text, kind text, payload jsonb, priority int, max_attempts int,
          max_attempts_default boolean, delay float8, run_after timestamptz, total int, concurrency_key text, idempotency_key text),
     n
ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, tenant, run_after, created_at
),"""
    + tenant_counters("inserted")
    + """
SELECT (SELECT ts FROM n) AS created_at,
       count(*) AS inserted,
       CASE WHEN %(keyed)s THEN array_agg(id) END AS ids,
       array_agg(id) FILTER (WHERE run_after <> created_at) AS later_ids,
       array_agg(run_after) FILTER (WHERE run_after <> created_at) AS later_run_after,
       CASE WHEN %(notify)s AND count(*) > 0 THEN pg_notify('jobq_jobs', %(wake_queues)s) END AS woke
FROM inserted
"""
)

READ_BY_IDEMPOTENCY_KEYS = (
    """
SELECT """
    + STATUS_COLUMNS
    + """
FROM jobs j
WHERE (j.tenant, j.idempotency_key) IN (
    SELECT * FROM unnest(%(tenants)s::text[], %(keys)s::text[])
)
"""
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
CLAIM_JOBS = (
    """
WITH RECURSIVE n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
q AS (
    SELECT unnest(%(queues)s::text[]) AS queue
),
walk(tenant, lap, first, step) AS (
    SELECT %(cursor)s::text, 0, true, 0
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
              AND (%(kinds)s::text[] IS NULL OR j.kind = ANY(%(kinds)s::text[]))
            ORDER BY j.tenant
            LIMIT 1
        ) AS h
    ) AS nxt
    -- one lap from the cursor to the end, then one from the start back to the cursor
    WHERE (w.tenant IS NULL AND w.lap = 0) OR (w.tenant IS NOT NULL AND (w.lap = 0 OR w.tenant < %(cursor)s))
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
        WHERE NOT w.first AND w.tenant IS NOT NULL AND (w.lap = 0 OR w.tenant <= %(cursor)s)
    ) AS w
    WHERE w.room IS NULL OR w.room > 0
    LIMIT %(visit)s
),
cand AS (
    -- each visited tenant's next jobs, to rank (not locked: another claimer may hold some)
    SELECT c.id, c.tenant, t.step, t.weight, t.running AS tenant_running, t.room AS tenant_room,
           row_number() OVER (PARTITION BY c.tenant ORDER BY c.priority DESC, c.run_after, c.id) AS place
    FROM tenants AS t
    CROSS JOIN LATERAL (
        SELECT j.*
        FROM q CROSS JOIN LATERAL (
            SELECT j.id, j.tenant, j.priority, j.run_after
            FROM jobs AS j, n
            WHERE j.state = 'queued' AND j.queue = q.queue AND j.tenant = t.tenant
              AND j.run_after <= n.ts
              AND (%(kinds)s::text[] IS NULL OR j.kind = ANY(%(kinds)s::text[]))
              AND NOT EXISTS (
                  SELECT 1 FROM scope_counters AS s
                  WHERE s.scope IN ('kind:' || j.kind, 'queue:' || j.queue, 'key:' || j.concurrency_key)
                    AND """
    + _room("s")
    + """ <= 0)
            ORDER BY j.priority DESC, j.run_after, j.id
            LIMIT %(limit)s
        ) AS j
        ORDER BY j.priority DESC, j.run_after, j.id
        LIMIT %(limit)s
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
        LIMIT %(limit)s
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
              AND (%(kinds)s::text[] IS NULL OR j.kind = ANY(%(kinds)s::text[]))
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

# The item outcomes a heartbeat or a completion carries, and what they change in the job's
# counts: an item re-run after it failed (a retry past max_item_failures) moves from failed
# to its new state, so its old outcome is subtracted: job_items as it was before this
# statement (one snapshot for the whole statement). Each result is JSON text (a null result
# stays JSON null).
ITEM_INPUT = """
    SELECT x.*
    FROM jsonb_to_recordset(%(items)s::jsonb)
         AS x(job_id uuid, item_index int, state text, result text, error text, error_group text)
"""

ITEM_DELTAS = """
    SELECT x.job_id,
           count(*) FILTER (WHERE x.state = 'ok') - count(p.state) FILTER (WHERE p.state = 'ok') AS ok,
           count(*) FILTER (WHERE x.state = 'failed') - count(p.state) FILTER (WHERE p.state = 'failed') AS failed
    FROM item_input AS x
    LEFT JOIN LATERAL (
        -- one primary-key probe per item (OFFSET 0 keeps it a probe): joined as a set, a plan
        -- prepared while job_items was small would read all of it for every heartbeat after
        SELECT p.state FROM job_items AS p
        WHERE p.job_id = x.job_id AND p.item_index = x.item_index
        OFFSET 0
    ) AS p ON true
    GROUP BY x.job_id
"""

# Invariant 1: only the items of a job whose fenced update matched (``written``) are stored.
STORE_ITEMS = """
    INSERT INTO job_items AS i (job_id, item_index, state, result, error, error_group, attempt, finished_at)
    SELECT x.job_id, x.item_index, x.state, x.result::jsonb, x.error, x.error_group, w.attempts, w.ts
    FROM item_input AS x JOIN written AS w ON w.id = x.job_id
    ON CONFLICT (job_id, item_index) DO UPDATE
    SET state = excluded.state, result = excluded.result, error = excluded.error,
        error_group = excluded.error_group, attempt = excluded.attempt, finished_at = excluded.finished_at
"""

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
    WHERE j.id = %(job_id)s AND j.claims = %(claim)s AND j.attempts = %(attempt)s AND j.lease_owner = %(owner)s
      AND j.state = 'running'
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
    WHERE j.id = d.id AND j.claims = %(claim)s AND j.attempts = %(attempt)s AND j.lease_owner = %(owner)s
      AND j.state = 'running'
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
    WHERE j.id = %(job_id)s AND j.claims = %(claim)s AND j.attempts = %(attempt)s
      AND j.lease_owner = %(owner)s
      AND j.state = 'running'
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
    WHERE j.id = %(job_id)s AND j.claims = %(claim)s AND j.attempts = %(attempt)s
      AND j.lease_owner = %(owner)s
      AND j.state = 'running'
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
REAP_EXPIRED = (
    """
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
    RETURNING j.id, j.state, j.claims, j.tenant, j.kind, j.queue, j.concurrency_key, """
    + NOTIFY_CHANGED
    + """
),"""
    + give_back("reaped")
    + """,
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'lease_expired', error = 'lease expired'
    FROM reaped AS r, n
    WHERE a.job_id = r.id AND a.claim = r.claims AND a.finished_at IS NULL
)
SELECT state, count(*) AS jobs FROM reaped GROUP BY state
"""
)

# -- cancel_job --
# A queued job is cancelled at once; a running one is asked to stop and its
# worker sees cancel_requested on its next heartbeat. Terminal jobs match nothing.
CANCEL_JOB = (
    """
UPDATE jobs AS j
SET state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
    cancel_requested = (state = 'running'),
    finished_at = CASE WHEN state = 'queued' THEN coalesce(%(now)s::timestamptz, now()) ELSE finished_at END,
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(job_id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND state IN ('queued', 'running')
RETURNING """
    + STATUS_COLUMNS
    + ", "
    + NOTIFY_CHANGED
)

# -- replay_jobs --
# Invariant 5: a terminal job changes only through replay, and each replay is
# recorded in job_replays with who asked and what the job was before. A replay of
# failed items picks jobs (succeeded ones too) that have some, and removes only those outcomes.
REPLAY_JOBS = (
    """
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
      AND (%(error_group)s::text IS NULL OR error_group = %(error_group)s)
      AND (%(since)s::timestamptz IS NULL OR finished_at >= %(since)s::timestamptz)
      AND (NOT %(failed_items)s OR items_failed > 0)
    ORDER BY id
    FOR UPDATE SKIP LOCKED
),
cleared AS (
    -- Re-running only the failed items: their outcomes go, the ok ones stay (the next attempt skips those).
    DELETE FROM job_items AS i
    USING picked
    WHERE %(failed_items)s AND i.job_id = picked.id AND i.state = 'failed'
),
replayed AS (
    UPDATE jobs AS j
    SET state = 'queued', attempts = 0, error = NULL, error_group = NULL, cancel_requested = false,
        lease_owner = NULL, lease_expires_at = NULL, run_after = n.ts, finished_at = NULL,
        items_failed = CASE WHEN %(failed_items)s THEN 0 ELSE j.items_failed END,
        done = CASE WHEN %(failed_items)s THEN j.items_ok ELSE j.done END,
        updated_at = n.ts
    FROM picked, n
    WHERE j.id = picked.id
    RETURNING j.id, j.tenant, """
    + NOTIFY_CHANGED
    + """
),"""
    + tenant_counters("replayed")
    + """,
recorded AS (
    INSERT INTO job_replays (job_id, replayed_at, replayed_by, previous_state, previous_error,
                             previous_attempts)
    SELECT picked.id, n.ts, %(by)s, picked.state, picked.error, picked.attempts FROM picked, n
)
SELECT id FROM replayed ORDER BY id
"""
)

# -- limits (an operator's change) --
# Each runs in one transaction after LOCK_COUNTERS. EXCLUSIVE conflicts with the ROW
# EXCLUSIVE lock that every claim, finish and enqueue takes on scope_counters from its
# start, so the lock waits for those in flight and holds back new ones until commit;
# the counts below are then read from a snapshot no claim or finish can move: exact.
# Reads (SELECT) of the table go on meanwhile. The lock is held for milliseconds.
LOCK_COUNTERS = "LOCK TABLE scope_counters IN EXCLUSIVE MODE"

SET_LIMIT = """
INSERT INTO limits (scope, concurrency, rate, per_seconds, weight, updated_at)
VALUES (%(scope)s, %(concurrency)s, %(rate)s, %(per_seconds)s, %(weight)s, coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (scope) DO UPDATE
SET concurrency = excluded.concurrency, rate = excluded.rate, per_seconds = excluded.per_seconds,
    weight = excluded.weight, updated_at = excluded.updated_at
"""

DELETE_LIMIT = "DELETE FROM limits WHERE scope = %(scope)s RETURNING scope"

# The counters of the scopes a change touched, made to agree with limits and with the
# running jobs: a scope left without a concurrency or rate limit loses its counter; one
# that has a limit gets one whose running is counted from the jobs (one pass over the
# running rows). A tenant's limit is its own where set, else tenant:*'s; a change of
# tenant:* touches every tenant that has a counter or active jobs. The rate window is
# kept unless the rate changed.
REFRESH_COUNTERS = """
WITH wanted AS (
    SELECT %(scope)s::text AS scope WHERE %(scope)s <> 'tenant:*'
    UNION
    SELECT scope FROM scope_counters WHERE %(scope)s = 'tenant:*' AND scope LIKE 'tenant:%%'
    UNION
    SELECT DISTINCT 'tenant:' || tenant FROM jobs
    WHERE %(scope)s = 'tenant:*' AND state IN ('queued', 'running')
),
effective AS (
    SELECT w.scope,
           coalesce(own.concurrency, d.concurrency) AS concurrency,
           coalesce(own.rate, d.rate) AS rate,
           coalesce(own.per_seconds, d.per_seconds) AS per_seconds
    FROM wanted AS w
    LEFT JOIN limits AS own ON own.scope = w.scope
    LEFT JOIN limits AS d ON d.scope = 'tenant:*' AND w.scope LIKE 'tenant:%%'
),
running AS (
    SELECT s.scope, count(*) AS jobs
    FROM jobs AS j CROSS JOIN LATERAL unnest(ARRAY['tenant:' || j.tenant, 'kind:' || j.kind,
                                                   'queue:' || j.queue, 'key:' || j.concurrency_key]) AS s(scope)
    WHERE j.state = 'running' AND s.scope IN (SELECT scope FROM wanted)
    GROUP BY s.scope
),
gone AS (
    DELETE FROM scope_counters AS c USING effective AS e
    WHERE c.scope = e.scope AND e.concurrency IS NULL AND e.rate IS NULL
)
INSERT INTO scope_counters AS c (scope, running, concurrency, rate, per_seconds)
SELECT e.scope, coalesce(r.jobs, 0), e.concurrency, e.rate, e.per_seconds
FROM effective AS e LEFT JOIN running AS r ON r.scope = e.scope
WHERE e.concurrency IS NOT NULL OR e.rate IS NOT NULL
ON CONFLICT (scope) DO UPDATE
SET running = excluded.running, concurrency = excluded.concurrency, rate = excluded.rate,
    per_seconds = excluded.per_seconds,
    window_start = CASE WHEN c.rate IS NOT DISTINCT FROM excluded.rate
                         AND c.per_seconds IS NOT DISTINCT FROM excluded.per_seconds THEN c.window_start END,
    window_starts = CASE WHEN c.rate IS NOT DISTINCT FROM excluded.rate
                          AND c.per_seconds IS NOT DISTINCT FROM excluded.per_seconds THEN c.window_starts ELSE 0 END
"""
