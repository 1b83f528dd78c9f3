-- name: lock_counters
-- -- limits (an operator's change) --
-- Each runs in one transaction after LOCK_COUNTERS. EXCLUSIVE conflicts with the ROW
-- EXCLUSIVE lock that every claim, finish and enqueue takes on scope_counters from its
-- start, so the lock waits for those in flight and holds back new ones until commit;
-- the counts below are then read from a snapshot no claim or finish can move: exact.
-- Reads (SELECT) of the table go on meanwhile. The lock is held for milliseconds.
LOCK TABLE scope_counters IN EXCLUSIVE MODE

-- name: refresh_counters
-- The counters of the scopes a change touched, made to agree with limits and with the
-- running jobs: a scope left without a concurrency or rate limit loses its counter; one
-- that has a limit gets one whose running is counted from the jobs (one pass over the
-- running rows). A tenant's limit is its own where set, else tenant:*'s; a change of
-- tenant:* touches every tenant that has a counter or active jobs. The rate window is
-- kept unless the rate changed.
WITH wanted AS (
    SELECT :scope::text AS scope WHERE :scope <> 'tenant:*'
    UNION
    SELECT scope FROM scope_counters WHERE :scope = 'tenant:*' AND scope LIKE 'tenant:%'
    UNION
    SELECT DISTINCT 'tenant:' || tenant FROM jobs
    WHERE :scope = 'tenant:*' AND state IN ('queued', 'running')
),
effective AS (
    SELECT w.scope,
           coalesce(own.concurrency, d.concurrency) AS concurrency,
           coalesce(own.rate, d.rate) AS rate,
           coalesce(own.per_seconds, d.per_seconds) AS per_seconds
    FROM wanted AS w
    LEFT JOIN limits AS own ON own.scope = w.scope
    LEFT JOIN limits AS d ON d.scope = 'tenant:*' AND w.scope LIKE 'tenant:%'
),
running AS (
    SELECT s.scope, count(*) AS jobs
    FROM jobs AS j CROSS JOIN LATERAL unnest({{scopes(j)}}) AS s(scope)
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

-- fragment: scopes(x)
-- The scopes a job row (alias x) counts in, as an array to unnest; NULL (no concurrency
-- key) is skipped by the callers.
ARRAY[{{job_scopes(x)}}]

-- fragment: window(c)
-- The rate window a scope_counters row (alias c) counts at n.ts: windows of per_seconds
-- aligned to the Unix epoch (service.limits.rate_window in Python).
to_timestamp(floor(extract(epoch FROM n.ts) / {c}.per_seconds) * {c}.per_seconds)

-- fragment: room(c)
-- The room left in a scope (a scope_counters row, alias c) at n.ts: the concurrency left
-- and the starts left in the current rate window, whichever is fewer (2147483647: no
-- limit of that sort). ScopeUsage.room in service.limits is the same rule in Python.
least(coalesce({c}.concurrency - {c}.running, 2147483647), CASE WHEN {c}.rate IS NULL THEN 2147483647 WHEN {c}.window_start = {{window(c)}} THEN {c}.rate - {c}.window_starts ELSE {c}.rate END)

-- fragment: give_back(ended)
-- A slot given back: every statement that ends a run (complete, fail, release, cancel
-- acknowledged, reap) subtracts its ended jobs (the CTE named by the argument) from
-- their scopes' counters in the same statement, so a counter never counts a job that is
-- no longer running. Only counters that exist change (scopes with a limit). Rows are
-- taken in scope order, as the claim locks them, so a finish and a claim never wait on
-- each other in a cycle.
freed AS (
    UPDATE scope_counters AS c
    SET running = c.running - e.jobs
    FROM (
        SELECT s.scope, count(*) AS jobs
        FROM {ended} AS e CROSS JOIN LATERAL unnest({{scopes(e)}}) AS s(scope)
        WHERE s.scope IS NOT NULL
        GROUP BY s.scope
        ORDER BY s.scope
    ) AS e
    WHERE c.scope = e.scope
)

-- fragment: tenant_counters(added)
-- A tenant:* limit gives each tenant a counter of its own: made (running 0) when the
-- tenant's first jobs are queued (enqueue, replay: the CTE named by the argument), so
-- the claim finds one to lock. Nothing when no tenant:* limit counts anything. A
-- conflict does nothing and takes no lock.
counters AS (
    INSERT INTO scope_counters (scope, concurrency, rate, per_seconds)
    SELECT DISTINCT 'tenant:' || a.tenant,
           coalesce(own.concurrency, d.concurrency), coalesce(own.rate, d.rate),
           coalesce(own.per_seconds, d.per_seconds)
    FROM {added} AS a
    JOIN limits AS d ON d.scope = 'tenant:*'
    LEFT JOIN limits AS own ON own.scope = 'tenant:' || a.tenant
    WHERE coalesce(own.concurrency, d.concurrency, own.rate, d.rate) IS NOT NULL
    ON CONFLICT (scope) DO NOTHING
)
