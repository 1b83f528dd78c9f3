-- name: claim_jobs
-- The claim: up to :limit due jobs of the worker's queues (and kinds), fair across
-- tenants and within every limit, in one statement and one round trip.
-- Invariant 1: FOR UPDATE SKIP LOCKED (``picked``) hands each due row to exactly one
-- claimer and never makes a claimer wait for a job; attempts + 1 and the lease are set
-- in the same statement (``claimed``), so the fencing token (claims, attempts,
-- lease_owner) is born with the claim. Invariant 2: the lease expiry comes from the
-- database clock. The store runs CLAIM_PLANNER before it, in its transaction (see there).
-- Read top to bottom: which tenants (walk, tenants, rivals), how many jobs each (cand, shares),
-- which rows (picked), whether every limit still allows them (scoped ... admitted), and
-- the writes (claimed, counted, opened).
--
-- The parameters, read through ``n``, a CTE the planner cannot see into: a plan for given
-- values then costs no less than the generic one, and PostgreSQL keeps the generic plan
-- after its five trial plans (planning took as long as running: docs/PERFORMANCE.md).
WITH RECURSIVE n AS (
    SELECT {{now}} AS ts, :queues::text[] AS queues, :kinds::text[] AS kinds,
           :cursor::text AS cursor, :visit::int AS visit, :limit::int AS lim
),
-- Where this worker last found lines' heads (service.store.postgres.heads), one row per
-- (queue, tenant): the line's head priority and a run_after at or below its head's. Empty on
-- a full walk.
hint AS (
    SELECT * FROM unnest(:hint_queues::text[], :hint_tenants::text[], :hint_priorities::int[],
                         :hint_run_afters::timestamptz[]) AS k(queue, tenant, priority, run_after)
),
-- The worker's queues, one row each: every read of jobs below is one probe of
-- ix_jobs_claimable per queue.
q AS (
    SELECT unnest(n.queues) AS queue FROM n
),
-- Fairness, step 1: the tenants with a due job, in name order, starting just after
-- :cursor (the last tenant this worker took from) and wrapping around once: one probe of
-- ix_jobs_claimable per tenant (a loose index scan), never every queued row.
-- Each probe stops at the first due job of the next tenant in its queue: that job's key
-- (h*: queue, tenant, priority, run_after, id, one element per queue) is the head of the
-- tenant's line there, and ``cand`` and ``picked`` start their scans at it (heads, below).
-- A tenant with a hint is probed from the hint (``probe``): its line's entries below it are
-- not visited. ``reached``: how far the walk got in a queue, a hinted tenant whose line had
-- nothing due included, so the next step goes on after it (that step has no head of its
-- own tenant, and ``tenants`` passes it by).
walk(tenant, lap, first, step, hq, ht, hp, hr, hi) AS (
    SELECT n.cursor, 0, true, 0, NULL::text[], NULL::text[], NULL::int[], NULL::timestamptz[], NULL::uuid[] FROM n
    UNION ALL
    SELECT nxt.tenant, w.lap + CASE WHEN w.tenant IS NULL THEN 1 ELSE 0 END, false, w.step + 1,
           nxt.hq, nxt.ht, nxt.hp, nxt.hr, nxt.hi
    FROM walk AS w
    CROSS JOIN LATERAL (
        SELECT min(h.reached) AS tenant,
               array_agg(h.queue) FILTER (WHERE h.tenant IS NOT NULL) AS hq,
               array_agg(h.tenant) FILTER (WHERE h.tenant IS NOT NULL) AS ht,
               array_agg(h.priority) FILTER (WHERE h.tenant IS NOT NULL) AS hp,
               array_agg(h.run_after) FILTER (WHERE h.tenant IS NOT NULL) AS hr,
               array_agg(h.id) FILTER (WHERE h.tenant IS NOT NULL) AS hi
        FROM q
        LEFT JOIN LATERAL (
            SELECT k.tenant, k.priority, k.run_after FROM hint AS k
            WHERE k.queue = q.queue AND k.tenant > coalesce(w.tenant, '')
            ORDER BY k.tenant
            LIMIT 1
        ) AS k ON true
        CROSS JOIN LATERAL (
            SELECT q.queue, f.tenant, f.priority, f.run_after, f.id, coalesce(f.tenant, k.tenant) AS reached
            FROM (SELECT 1) AS one
            LEFT JOIN LATERAL (
                -- the tenants before the next hinted one (or all the rest: no hint after this step)
                (SELECT j.tenant, j.priority, j.run_after, j.id
                 FROM jobs AS j
                 WHERE {{walk_line(j)}} AND j.queue = q.queue AND j.tenant > coalesce(w.tenant, '')
                   AND j.tenant < k.tenant
                 ORDER BY j.tenant, j.priority DESC, j.run_after, j.id
                 LIMIT 1)
                UNION ALL
                (SELECT j.tenant, j.priority, j.run_after, j.id
                 FROM jobs AS j
                 WHERE {{walk_line(j)}} AND j.queue = q.queue AND j.tenant > coalesce(w.tenant, '')
                   AND k.tenant IS NULL
                 ORDER BY j.tenant, j.priority DESC, j.run_after, j.id
                 LIMIT 1)
                UNION ALL
                -- the hinted tenant's line: its higher priorities, its hinted one from the hint on,
                -- its lower ones
                (SELECT j.tenant, j.priority, j.run_after, j.id
                 FROM jobs AS j
                 WHERE {{walk_line(j)}} AND j.queue = q.queue AND j.tenant = k.tenant AND j.priority > k.priority
                 ORDER BY j.priority DESC, j.run_after, j.id
                 LIMIT 1)
                UNION ALL
                (SELECT j.tenant, j.priority, j.run_after, j.id
                 FROM jobs AS j
                 WHERE {{walk_line(j)}} AND j.queue = q.queue AND j.tenant = k.tenant AND j.priority = k.priority
                   AND j.run_after >= k.run_after
                 ORDER BY j.run_after, j.id
                 LIMIT 1)
                UNION ALL
                (SELECT j.tenant, j.priority, j.run_after, j.id
                 FROM jobs AS j
                 WHERE {{walk_line(j)}} AND j.queue = q.queue AND j.tenant = k.tenant AND j.priority < k.priority
                 ORDER BY j.priority DESC, j.run_after, j.id
                 LIMIT 1)
                ORDER BY 1, 2 DESC, 3, 4
                LIMIT 1
            ) AS f ON true
        ) AS h
        WHERE h.reached IS NOT NULL
    ) AS nxt
    -- one lap from the cursor to the end, then one from the start back to the cursor
    WHERE (w.tenant IS NULL AND w.lap = 0) OR (w.tenant IS NOT NULL AND (w.lap = 0 OR w.tenant < (SELECT cursor FROM n)))
),
-- Fairness, step 2: the first :visit tenants of the walk that have room in their tenant
-- scope, each with its weight. A tenant:* limit with no counter
-- for the tenant leaves no room (the counter is made at enqueue; missing means a bug,
-- and a bug must idle, not overrun). Scalar subqueries, not joins: the walk is then
-- pulled only until :visit tenants with room are found (a hash join would build the
-- whole walk, one probe per tenant).
tenants AS (
    SELECT w.tenant, w.room, w.step, w.hq, w.ht, w.hp, w.hr, w.hi,
           coalesce((SELECT own.weight FROM limits AS own WHERE own.scope = 'tenant:' || w.tenant),
                    (SELECT dflt.weight FROM limits AS dflt WHERE dflt.scope = 'tenant:*'), 1.0) AS weight
    FROM (
        SELECT w.tenant, w.step, w.hq, w.ht, w.hp, w.hr, w.hi,
               coalesce((SELECT {{room(c)}} FROM scope_counters AS c, n
                         WHERE c.scope = 'tenant:' || w.tenant),
                        CASE WHEN {{every_tenant_limited}} THEN 0 END) AS room
        FROM walk AS w
        WHERE NOT w.first AND w.tenant = ANY(w.ht) AND (w.lap = 0 OR w.tenant <= (SELECT cursor FROM n))
    ) AS w
    WHERE w.room IS NULL OR w.room > 0
    LIMIT (SELECT visit FROM n)
),
-- Each visited tenant's running jobs, counted only when tenants compete: they order tenants
-- against each other (``shares``), and a lone tenant's share is the same whatever its count.
-- The count reads ix_jobs_running, which keeps an entry for every job that ran since dead
-- entries could last be removed: behind a pinned xmin horizon (a session idle in
-- transaction), every job finished since, so a lone tenant's claim would read them all for
-- nothing (docs/PERFORMANCE.md, "bloat").
rivals AS (
    SELECT t.tenant, t.room, t.step, t.weight, t.hq, t.ht, t.hp, t.hr, t.hi,
           CASE WHEN (SELECT count(*) FROM tenants) > 1
                THEN (SELECT count(*) FROM jobs AS r WHERE r.state = 'running' AND r.tenant = t.tenant)
                ELSE 0
           END AS running
    FROM tenants AS t
),
-- Fairness, step 3: each visited tenant's next :limit jobs in its own priority order,
-- ranked (``place``), not locked: another claimer may hold some. The line of a tenant is
-- the same index probe as ``picked`` takes (tenant_line), so both see the same jobs.
cand AS (
    SELECT c.id, c.tenant, t.step, t.weight, t.running AS tenant_running, t.room AS tenant_room,
           row_number() OVER (PARTITION BY c.tenant ORDER BY c.priority DESC, c.run_after, c.id) AS place
    FROM rivals AS t
    CROSS JOIN LATERAL (
        SELECT j.*
        FROM unnest(t.hq, t.ht, t.hp, t.hr, t.hi) AS h(queue, tenant, priority, run_after, id)
        CROSS JOIN LATERAL (
            (SELECT j.id, j.tenant, j.priority, j.run_after
             FROM jobs AS j
             WHERE {{tenant_line(h.queue, t.tenant)}} AND {{from_head(h)}}
             ORDER BY j.priority DESC, j.run_after, j.id
             LIMIT (SELECT lim FROM n))
            UNION ALL
            (SELECT j.id, j.tenant, j.priority, j.run_after
             FROM jobs AS j
             WHERE {{tenant_line(h.queue, t.tenant)}} AND j.priority < h.priority
             ORDER BY j.priority DESC, j.run_after, j.id
             LIMIT (SELECT lim FROM n))
        ) AS j
        WHERE h.tenant = t.tenant
        ORDER BY j.priority DESC, j.run_after, j.id
        LIMIT (SELECT lim FROM n)
    ) AS c
),
-- Fairness, step 4: how many jobs each tenant gets. A job's virtual time is (its tenant's
-- running jobs + its place in its tenant's line) / the tenant's weight; the :limit lowest
-- among all candidates make the shares, ties in visiting order (round robin). So a
-- tenant's priority orders only its own jobs, a tenant with fewer running jobs (per
-- weight) goes first, and a lone tenant takes every free slot (work-conserving).
shares AS (
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
-- Invariant 1: each tenant's share, locked FOR UPDATE SKIP LOCKED down the tenant's line:
-- past rows another claimer holds, so claimers at the same instant take different jobs
-- rather than all but one coming back empty. Each queue's line is read from its head (as
-- in ``cand``) and then its lower priorities; both parts lock up to the share before the
-- best of them are kept, so a line of several priorities may hold a few lower-priority
-- rows locked until the claim commits (as a worker of several queues already may), which
-- a claimer at the same instant then passes over.
picked AS (
    SELECT j.id, j.tenant, j.kind, j.queue, j.concurrency_key, sh.step, j.place
    FROM shares AS sh
    CROSS JOIN LATERAL (
        SELECT j.*, row_number() OVER (ORDER BY j.priority DESC, j.run_after, j.id) AS place
        FROM (SELECT t.hq, t.ht, t.hp, t.hr, t.hi FROM rivals AS t WHERE t.tenant = sh.tenant) AS t
        CROSS JOIN LATERAL unnest(t.hq, t.ht, t.hp, t.hr, t.hi) AS h(queue, tenant, priority, run_after, id)
        CROSS JOIN LATERAL (
            (SELECT * FROM (
                 SELECT j.id, j.tenant, j.kind, j.queue, j.concurrency_key, j.priority, j.run_after
                 FROM jobs AS j
                 WHERE {{tenant_line(h.queue, sh.tenant)}} AND {{from_head(h)}}
                 ORDER BY j.priority DESC, j.run_after, j.id
                 LIMIT sh.share
                 FOR UPDATE OF j SKIP LOCKED
             ) AS head)
            UNION ALL
            (SELECT * FROM (
                 SELECT j.id, j.tenant, j.kind, j.queue, j.concurrency_key, j.priority, j.run_after
                 FROM jobs AS j
                 WHERE {{tenant_line(h.queue, sh.tenant)}} AND j.priority < h.priority
                 ORDER BY j.priority DESC, j.run_after, j.id
                 LIMIT sh.share
                 FOR UPDATE OF j SKIP LOCKED
             ) AS lower)
        ) AS j
        WHERE h.tenant = sh.tenant
        ORDER BY j.priority DESC, j.run_after, j.id
        LIMIT sh.share
    ) AS j
),
-- Limits, from here to ``admitted``: why no race puts a scope over its limit. Every
-- limited scope has a scope_counters row whose ``running`` is exact: this statement adds
-- what it takes (``counted``), every statement that ends a run subtracts (give_back),
-- and an operator's change recomputes it under LOCK_COUNTERS, which waits for every
-- claim and finish in flight. The rooms read above come from this statement's snapshot,
-- which may be stale under READ COMMITTED (two claimers can both see "2 of 3 running"):
-- they only skip hopeless candidates early. The decision is taken on locked rows.
-- ``scoped``: each picked job once per scope it counts in.
scoped AS (
    SELECT p.id, p.place, p.step, s.scope
    FROM picked AS p CROSS JOIN LATERAL unnest({{scopes(p)}}) AS s(scope)
    WHERE s.scope IS NOT NULL
),
-- The counter rows of those scopes, locked FOR UPDATE in scope order (no deadlock between
-- claimers, nor with a finish's give_back). A row changed by a claimer or finisher that
-- committed after our snapshot is read in its newest version (READ COMMITTED re-reads a
-- row it waited to lock), and a second claimer waits for the first's commit.
counters AS (
    SELECT c.scope, {{room(c)}} AS room
    FROM scope_counters AS c, n
    WHERE c.scope IN (SELECT scope FROM scoped)
    ORDER BY c.scope
    FOR UPDATE OF c
),
-- Each picked job's place among the picked jobs of each of its scopes, beside the room
-- left there (NULL: no limit; a tenant:* limit without the tenant's counter: none).
placed AS (
    SELECT s.id, s.scope,
           row_number() OVER (PARTITION BY s.scope ORDER BY s.place, s.step) AS place,
           CASE WHEN c.scope IS NOT NULL THEN c.room
                WHEN s.scope LIKE 'tenant:%' AND {{every_tenant_limited}} THEN 0
           END AS room
    FROM scoped AS s LEFT JOIN counters AS c ON c.scope = s.scope
),
-- A job is taken when its place is within the room in every one of its scopes. One
-- picked but not admitted (a scope filled meanwhile) is simply not updated: its row lock
-- ends with the statement. The placement is conservative (a job refused by one scope
-- still holds its place in the others): a race can cost a slot for one claim, never put
-- a scope over its limit.
admitted AS (
    SELECT id FROM placed GROUP BY id HAVING bool_and(room IS NULL OR place <= room)
),
-- Invariants 1 and 2: the claim proper, the fencing token and the lease in one write.
claimed AS (
    UPDATE jobs AS j
    SET state = 'running',
        attempts = j.attempts + 1,
        claims = j.claims + 1,
        -- the kind's max_attempts (the claimer's handler's): the default of a job that named
        -- none, a ceiling on one that did; never below this attempt (attempts <= max_attempts)
        max_attempts = CASE WHEN :kind_max_attempts::jsonb ->> j.kind IS NULL THEN j.max_attempts
                            WHEN j.max_attempts_default
                            THEN GREATEST(j.attempts + 1, (:kind_max_attempts::jsonb ->> j.kind)::int)
                            ELSE GREATEST(j.attempts + 1,
                                          LEAST(j.max_attempts, (:kind_max_attempts::jsonb ->> j.kind)::int))
                       END,
        lease_owner = :worker,
        lease_expires_at = n.ts + make_interval(secs => :lease_seconds),
        started_at = n.ts,
        updated_at = n.ts
    FROM admitted, n
    WHERE j.id = admitted.id
    RETURNING j.id, j.kind, j.queue, j.tenant, j.concurrency_key, j.payload, j.checkpoint, j.done, j.total, j.items_ok, j.items_failed,
              j.attempts, j.claims, j.max_attempts, j.lease_expires_at, j.run_after, n.ts AS started_at, {{notify_changed}}
),
-- The claimed jobs added to the very counter rows ``counters`` holds: running, and the
-- starts in the current rate window (a new window starts its count afresh).
counted AS (
    UPDATE scope_counters AS c
    SET running = c.running + t.jobs,
        window_start = CASE WHEN c.rate IS NULL THEN c.window_start ELSE {{window(c)}} END,
        window_starts = CASE WHEN c.rate IS NULL THEN c.window_starts
                             WHEN c.window_start = {{window(c)}} THEN c.window_starts + t.jobs
                             ELSE t.jobs END
    FROM (
        SELECT s.scope, count(*) AS jobs
        FROM claimed AS cl CROSS JOIN LATERAL unnest({{scopes(cl)}}) AS s(scope)
        WHERE s.scope IS NOT NULL
        GROUP BY s.scope
    ) AS t, n
    WHERE c.scope = t.scope
),
-- Invariant 3: every attempt has its row from the moment it starts.
opened AS (
    INSERT INTO job_attempts (job_id, claim, attempt, worker, due_at, started_at)
    SELECT id, claims, attempts, :worker, run_after, started_at FROM claimed
)
-- Each claimed job with the head the walk found for its line (the store's next hint there,
-- service.store.postgres.heads): the line's first due job in this snapshot, taken or not.
SELECT c.*, h.priority AS head_priority, h.run_after AS head_run_after
FROM claimed AS c
LEFT JOIN LATERAL (
    SELECT h.priority, h.run_after
    FROM rivals AS t CROSS JOIN LATERAL unnest(t.hq, t.ht, t.hp, t.hr, t.hi) AS h(queue, tenant, priority, run_after, id)
    WHERE t.tenant = c.tenant AND h.tenant = c.tenant AND h.queue = c.queue
    LIMIT 1
) AS h ON true
ORDER BY c.id

-- fragment: tenant_line(queue, tenant)
-- A tenant's line in one queue (jobs alias j), in the order of
-- ix_jobs_claimable (``claimable`` is its predicate: a job waiting for parents is not in it,
-- so it costs a claim nothing): its due queued jobs of the worker's kinds, skipping jobs in a kind,
-- queue or key scope with no room (the tenant's own room is judged once, in ``tenants``).
-- The clock is a scalar, never a join to n: beside a long history the planner guesses
-- the line at one row, puts n outside, and loses the index's order.
{{claimable(j)}} AND j.queue = {queue} AND j.tenant = {tenant}
              AND j.run_after <= (SELECT ts FROM n)
              AND ((SELECT kinds FROM n) IS NULL OR j.kind = ANY((SELECT kinds FROM n)::text[]))
              AND NOT EXISTS (
                  SELECT 1 FROM scope_counters AS s, n
                  WHERE s.scope IN ({{scopes_below_tenant(j)}})
                    AND {{room(s)}} <= 0)

-- fragment: walk_line(j)
-- A due claimable job of the worker's kinds (alias ``{j}``), as the walk's probes read them.
{{claimable(j)}} AND {j}.run_after <= (SELECT ts FROM n)
AND ((SELECT kinds FROM n) IS NULL OR {j}.kind = ANY((SELECT kinds FROM n)::text[]))

-- fragment: from_head(h)
-- The part of a tenant's line (jobs alias j) at its head ``h``'s priority, from the head
-- on: equality on the index's columns up to priority, then a row comparison, so the scan
-- starts at the head, a btree descent, instead of at the line's first entry. Why it may:
-- every scan of the claim reads its one snapshot, and ``walk`` found ``h`` as the first
-- entry of the line that is due in that snapshot, so nothing due sorts before it (the
-- line's lower priorities are read after it, ``j.priority < h.priority``). What it skips:
-- the entries of jobs already claimed. Their row versions stay in ix_jobs_claimable until
-- no snapshot can see them any more; behind a pinned xmin horizon (a session idle in
-- transaction) that is every job claimed since, the oldest keys of the line, and each
-- costs a heap visit to every scan that passes it (docs/PERFORMANCE.md, "bloat"). The walk
-- still passes them once; ``cand`` and ``picked`` no longer do.
j.priority = {h}.priority AND (j.run_after, j.id) >= ({h}.run_after, {h}.id)

-- name: claim_planner
-- Run in the transaction of every CLAIM_JOBS, before it. The claim keeps one generic plan
-- per connection (its comment at ``n`` says why), planned for a row count it cannot know: LIMIT
-- from a parameter is taken as a tenth of the rows. On a small analysed table that makes
-- "read every queued row and sort them" look cheapest for ``cand`` and ``picked`` (a
-- sequential or a bitmap scan: 990 rows read and sorted to lock one, 2.4 ms), and "hash
-- every job" for finding the claimed rows again, and the plan is kept as the queue grows
-- (7 ms at 1,000 queued, growing with the backlog). The claim was written for one plan:
-- every read of jobs walks ix_jobs_claimable in claim order and stops at the share, and
-- every set it joins (at most its limit of rows) is joined by a nested loop of key
-- lookups. So that is the only plan left while it is planned, whatever the tables' size
-- or statistics: key lookups only (``key_lookups``), and no sorts. Every probe of jobs takes
-- its order from ix_jobs_claimable, and what is left to sort is the few rows the claim holds,
-- which every plan sorts alike; a plan that reads another index and sorts what it found is
-- what goes (under statistics taken behind a pinned horizon, each probe read every entry of
-- the queue in ix_jobs_due and sorted them: 250 ms a claim, migration 0017).
SELECT {{key_lookups}}, set_config('enable_sort', 'off', true), set_config('enable_incremental_sort', 'off', true)

-- name: key_lookup_planner
-- Run in the transaction of every COMPLETE_JOBS and SETTLE_DEPENDENTS, before it: their
-- releases update children found by key (workflows.sql, ``waiting``), and a plan made while
-- the tables were small would read a set once per child. Sorts stay on: a settle locks its
-- children in id order, and without a sort the plan reads the primary key whole for that order
-- (cancelling 8,000 children took 2 s instead of 1).
SELECT {{key_lookups}}

-- fragment: key_lookups
-- No sequential or bitmap scans, no hash or merge joins, and no Materialize (a set read once
-- and then again for every row of the other side: how a release of 8,000 children read 8,000
-- edges 8,000 times, 10 s). And no JIT: the connection asks for jit=off, but a pooler refuses
-- that option (connection.py), and over a deep queue the claim's cost estimate passes
-- jit_above_cost (~230 ms of compiling a claim that runs in ~2 ms, 1 M queued rows).
set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
set_config('enable_material', 'off', true), set_config('jit', 'off', true)

-- name: has_claimable
-- The idle worker's poll, before any claim: is a job of its queues (and kinds) due?
-- A few probes of the claim's partial index (ix_jobs_claimable: queued rows only), each
-- stopping at the first due row; no lock, no write. Behind CLAIM_PLANNER, and each probe in
-- the index's order, so that, as for the claim, no other index can serve it (the poll read
-- ix_jobs_due under statistics taken behind a pinned horizon). The fair claim, which decides
-- limits and shares, runs only after a true answer, so an idle fleet's polls read an empty
-- index instead of walking tenants under row locks.
-- The lines this worker's claims have hints for are read as the claim reads them
-- (service.store.postgres.heads): their higher and lower priorities whole, the hinted one from
-- its hint. Every other tenant of the worker's queues is read whole, a range of tenants
-- between two hinted ones (``gap``: after, before; NULL: no end) at a time, so no probe passes
-- a hinted line's entries below its hint: behind a pinned horizon those are every job claimed
-- since, and a probe from the queue's start passed them all at every poll (4,607 buffers,
-- 27 ms, after 150 s at 800 jobs/s). With no hints (one poll a second, as claims walk in
-- full), the gaps are each queue whole: a job due below a hint is found there.
SELECT EXISTS (
    SELECT 1
    FROM unnest(:hint_queues::text[], :hint_tenants::text[], :hint_priorities::int[],
                :hint_run_afters::timestamptz[]) AS k(queue, tenant, priority, run_after)
    CROSS JOIN LATERAL (
        (SELECT 1 FROM jobs AS j
         WHERE {{polled(j)}} AND j.queue = k.queue AND j.tenant = k.tenant AND j.priority > k.priority
         ORDER BY j.priority DESC, j.run_after, j.id
         LIMIT 1)
        UNION ALL
        (SELECT 1 FROM jobs AS j
         WHERE {{polled(j)}} AND j.queue = k.queue AND j.tenant = k.tenant AND j.priority = k.priority
           AND j.run_after >= k.run_after
         ORDER BY j.run_after, j.id
         LIMIT 1)
        UNION ALL
        (SELECT 1 FROM jobs AS j
         WHERE {{polled(j)}} AND j.queue = k.queue AND j.tenant = k.tenant AND j.priority < k.priority
         ORDER BY j.priority DESC, j.run_after, j.id
         LIMIT 1)
        LIMIT 1
    ) AS due
) OR EXISTS (
    SELECT 1
    FROM unnest(:gap_queues::text[], :gap_afters::text[], :gap_befores::text[]) AS g(queue, after, before)
    CROSS JOIN LATERAL (
        (SELECT 1 FROM jobs AS j
         WHERE {{polled(j)}} AND j.queue = g.queue AND j.tenant > g.after AND j.tenant < g.before
         ORDER BY j.tenant, j.priority DESC, j.run_after, j.id
         LIMIT 1)
        UNION ALL
        (SELECT 1 FROM jobs AS j
         WHERE {{polled(j)}} AND j.queue = g.queue AND j.tenant > g.after AND g.before IS NULL
         ORDER BY j.tenant, j.priority DESC, j.run_after, j.id
         LIMIT 1)
        LIMIT 1
    ) AS due
) AS claimable

-- fragment: polled(j)
-- A due claimable job of the polling worker's kinds (alias ``{j}``).
{{claimable(j)}} AND {j}.run_after <= {{now}} AND (:kinds::text[] IS NULL OR {j}.kind = ANY(:kinds::text[]))
