
WITH RECURSIVE n AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS ts, %(queues)s::text[] AS queues, %(kinds)s::text[] AS kinds,
           %(cursor)s::text AS cursor, %(visit)s::int AS visit, %(limit)s::int AS lim
),
hint AS (
    SELECT * FROM unnest(%(hint_queues)s::text[], %(hint_tenants)s::text[], %(hint_priorities)s::int[],
                         %(hint_run_afters)s::timestamptz[]) AS k(queue, tenant, priority, run_after)
),
q AS (
    SELECT unnest(n.queues) AS queue FROM n
),
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
                (SELECT j.tenant, j.priority, j.run_after, j.id
                 FROM jobs AS j
                 WHERE j.state = 'queued' AND j.run_after < '9999-12-31 00:00:00+00'::timestamptz AND j.run_after <= (SELECT ts FROM n)
AND ((SELECT kinds FROM n) IS NULL OR j.kind = ANY((SELECT kinds FROM n)::text[])) AND j.queue = q.queue AND j.tenant > coalesce(w.tenant, '')
                   AND j.tenant < k.tenant
                 ORDER BY j.tenant, j.priority DESC, j.run_after, j.id
                 LIMIT 1)
                UNION ALL
                (SELECT j.tenant, j.priority, j.run_after, j.id
                 FROM jobs AS j
                 WHERE j.state = 'queued' AND j.run_after < '9999-12-31 00:00:00+00'::timestamptz AND j.run_after <= (SELECT ts FROM n)
AND ((SELECT kinds FROM n) IS NULL OR j.kind = ANY((SELECT kinds FROM n)::text[])) AND j.queue = q.queue AND j.tenant > coalesce(w.tenant, '')
                   AND k.tenant IS NULL
                 ORDER BY j.tenant, j.priority DESC, j.run_after, j.id
                 LIMIT 1)
                UNION ALL
                (SELECT j.tenant, j.priority, j.run_after, j.id
                 FROM jobs AS j
                 WHERE j.state = 'queued' AND j.run_after < '9999-12-31 00:00:00+00'::timestamptz AND j.run_after <= (SELECT ts FROM n)
AND ((SELECT kinds FROM n) IS NULL OR j.kind = ANY((SELECT kinds FROM n)::text[])) AND j.queue = q.queue AND j.tenant = k.tenant AND j.priority > k.priority
                 ORDER BY j.priority DESC, j.run_after, j.id
                 LIMIT 1)
                UNION ALL
                (SELECT j.tenant, j.priority, j.run_after, j.id
                 FROM jobs AS j
                 WHERE j.state = 'queued' AND j.run_after < '9999-12-31 00:00:00+00'::timestamptz AND j.run_after <= (SELECT ts FROM n)
AND ((SELECT kinds FROM n) IS NULL OR j.kind = ANY((SELECT kinds FROM n)::text[])) AND j.queue = q.queue AND j.tenant = k.tenant AND j.priority = k.priority
                   AND j.run_after >= k.run_after
                 ORDER BY j.run_after, j.id
                 LIMIT 1)
                UNION ALL
                (SELECT j.tenant, j.priority, j.run_after, j.id
                 FROM jobs AS j
                 WHERE j.state = 'queued' AND j.run_after < '9999-12-31 00:00:00+00'::timestamptz AND j.run_after <= (SELECT ts FROM n)
AND ((SELECT kinds FROM n) IS NULL OR j.kind = ANY((SELECT kinds FROM n)::text[])) AND j.queue = q.queue AND j.tenant = k.tenant AND j.priority < k.priority
                 ORDER BY j.priority DESC, j.run_after, j.id
                 LIMIT 1)
                ORDER BY 1, 2 DESC, 3, 4
                LIMIT 1
            ) AS f ON true
        ) AS h
        WHERE h.reached IS NOT NULL
    ) AS nxt
    WHERE (w.tenant IS NULL AND w.lap = 0) OR (w.tenant IS NOT NULL AND (w.lap = 0 OR w.tenant < (SELECT cursor FROM n)))
),
tenants AS (
    SELECT w.tenant, w.room, w.step, w.hq, w.ht, w.hp, w.hr, w.hi,
           coalesce((SELECT own.weight FROM limits AS own WHERE own.scope = 'tenant:' || w.tenant),
                    (SELECT dflt.weight FROM limits AS dflt WHERE dflt.scope = 'tenant:*'), 1.0) AS weight
    FROM (
        SELECT w.tenant, w.step, w.hq, w.ht, w.hp, w.hr, w.hi,
               coalesce((SELECT least(coalesce(c.concurrency - c.running, 2147483647), CASE WHEN c.rate IS NULL THEN 2147483647 WHEN c.window_start = to_timestamp(floor(extract(epoch FROM n.ts) / c.per_seconds) * c.per_seconds) THEN c.rate - c.window_starts ELSE c.rate END) FROM scope_counters AS c, n
                         WHERE c.scope = 'tenant:' || w.tenant),
                        CASE WHEN EXISTS (SELECT 1 FROM limits AS d WHERE d.scope = 'tenant:*' AND (d.concurrency IS NOT NULL OR d.rate IS NOT NULL)) THEN 0 END) AS room
        FROM walk AS w
        WHERE NOT w.first AND w.tenant = ANY(w.ht) AND (w.lap = 0 OR w.tenant <= (SELECT cursor FROM n))
    ) AS w
    WHERE w.room IS NULL OR w.room > 0
    LIMIT (SELECT visit FROM n)
),
rivals AS (
    SELECT t.tenant, t.room, t.step, t.weight, t.hq, t.ht, t.hp, t.hr, t.hi,
           CASE WHEN (SELECT count(*) FROM tenants) > 1
                THEN (SELECT count(*) FROM jobs AS r WHERE r.state = 'running' AND r.tenant = t.tenant)
                ELSE 0
           END AS running
    FROM tenants AS t
),
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
             WHERE j.state = 'queued' AND j.run_after < '9999-12-31 00:00:00+00'::timestamptz AND j.queue = h.queue AND j.tenant = t.tenant
              AND j.run_after <= (SELECT ts FROM n)
              AND ((SELECT kinds FROM n) IS NULL OR j.kind = ANY((SELECT kinds FROM n)::text[]))
              AND NOT EXISTS (
                  SELECT 1 FROM scope_counters AS s, n
                  WHERE s.scope IN ('kind:' || j.kind, 'queue:' || j.queue, 'key:' || j.concurrency_key)
                    AND least(coalesce(s.concurrency - s.running, 2147483647), CASE WHEN s.rate IS NULL THEN 2147483647 WHEN s.window_start = to_timestamp(floor(extract(epoch FROM n.ts) / s.per_seconds) * s.per_seconds) THEN s.rate - s.window_starts ELSE s.rate END) <= 0) AND j.priority = h.priority AND (j.run_after, j.id) >= (h.run_after, h.id)
             ORDER BY j.priority DESC, j.run_after, j.id
             LIMIT (SELECT lim FROM n))
            UNION ALL
            (SELECT j.id, j.tenant, j.priority, j.run_after
             FROM jobs AS j
             WHERE j.state = 'queued' AND j.run_after < '9999-12-31 00:00:00+00'::timestamptz AND j.queue = h.queue AND j.tenant = t.tenant
              AND j.run_after <= (SELECT ts FROM n)
              AND ((SELECT kinds FROM n) IS NULL OR j.kind = ANY((SELECT kinds FROM n)::text[]))
              AND NOT EXISTS (
                  SELECT 1 FROM scope_counters AS s, n
                  WHERE s.scope IN ('kind:' || j.kind, 'queue:' || j.queue, 'key:' || j.concurrency_key)
                    AND least(coalesce(s.concurrency - s.running, 2147483647), CASE WHEN s.rate IS NULL THEN 2147483647 WHEN s.window_start = to_timestamp(floor(extract(epoch FROM n.ts) / s.per_seconds) * s.per_seconds) THEN s.rate - s.window_starts ELSE s.rate END) <= 0) AND j.priority < h.priority
             ORDER BY j.priority DESC, j.run_after, j.id
             LIMIT (SELECT lim FROM n))
        ) AS j
        WHERE h.tenant = t.tenant
        ORDER BY j.priority DESC, j.run_after, j.id
        LIMIT (SELECT lim FROM n)
    ) AS c
),
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
                 WHERE j.state = 'queued' AND j.run_after < '9999-12-31 00:00:00+00'::timestamptz AND j.queue = h.queue AND j.tenant = sh.tenant
              AND j.run_after <= (SELECT ts FROM n)
              AND ((SELECT kinds FROM n) IS NULL OR j.kind = ANY((SELECT kinds FROM n)::text[]))
              AND NOT EXISTS (
                  SELECT 1 FROM scope_counters AS s, n
                  WHERE s.scope IN ('kind:' || j.kind, 'queue:' || j.queue, 'key:' || j.concurrency_key)
                    AND least(coalesce(s.concurrency - s.running, 2147483647), CASE WHEN s.rate IS NULL THEN 2147483647 WHEN s.window_start = to_timestamp(floor(extract(epoch FROM n.ts) / s.per_seconds) * s.per_seconds) THEN s.rate - s.window_starts ELSE s.rate END) <= 0) AND j.priority = h.priority AND (j.run_after, j.id) >= (h.run_after, h.id)
                 ORDER BY j.priority DESC, j.run_after, j.id
                 LIMIT sh.share
                 FOR UPDATE OF j SKIP LOCKED
             ) AS head)
            UNION ALL
            (SELECT * FROM (
                 SELECT j.id, j.tenant, j.kind, j.queue, j.concurrency_key, j.priority, j.run_after
                 FROM jobs AS j
                 WHERE j.state = 'queued' AND j.run_after < '9999-12-31 00:00:00+00'::timestamptz AND j.queue = h.queue AND j.tenant = sh.tenant
              AND j.run_after <= (SELECT ts FROM n)
              AND ((SELECT kinds FROM n) IS NULL OR j.kind = ANY((SELECT kinds FROM n)::text[]))
              AND NOT EXISTS (
                  SELECT 1 FROM scope_counters AS s, n
                  WHERE s.scope IN ('kind:' || j.kind, 'queue:' || j.queue, 'key:' || j.concurrency_key)
                    AND least(coalesce(s.concurrency - s.running, 2147483647), CASE WHEN s.rate IS NULL THEN 2147483647 WHEN s.window_start = to_timestamp(floor(extract(epoch FROM n.ts) / s.per_seconds) * s.per_seconds) THEN s.rate - s.window_starts ELSE s.rate END) <= 0) AND j.priority < h.priority
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
scoped AS (
    SELECT p.id, p.place, p.step, s.scope
    FROM picked AS p CROSS JOIN LATERAL unnest(ARRAY['tenant:' || p.tenant, 'kind:' || p.kind, 'queue:' || p.queue, 'key:' || p.concurrency_key]) AS s(scope)
    WHERE s.scope IS NOT NULL
),
counters AS (
    SELECT c.scope, least(coalesce(c.concurrency - c.running, 2147483647), CASE WHEN c.rate IS NULL THEN 2147483647 WHEN c.window_start = to_timestamp(floor(extract(epoch FROM n.ts) / c.per_seconds) * c.per_seconds) THEN c.rate - c.window_starts ELSE c.rate END) AS room
    FROM scope_counters AS c, n
    WHERE c.scope IN (SELECT scope FROM scoped)
    ORDER BY c.scope
    FOR UPDATE OF c
),
placed AS (
    SELECT s.id, s.scope,
           row_number() OVER (PARTITION BY s.scope ORDER BY s.place, s.step) AS place,
           CASE WHEN c.scope IS NOT NULL THEN c.room
                WHEN s.scope LIKE 'tenant:%%' AND EXISTS (SELECT 1 FROM limits AS d WHERE d.scope = 'tenant:*' AND (d.concurrency IS NOT NULL OR d.rate IS NOT NULL)) THEN 0
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
              j.attempts, j.claims, j.max_attempts, j.lease_expires_at, j.run_after, n.ts AS started_at, CASE WHEN %(notify)s THEN pg_notify('jobq_job_changes', j.id::text) END AS notified
),
counted AS (
    UPDATE scope_counters AS c
    SET running = c.running + t.jobs,
        window_start = CASE WHEN c.rate IS NULL THEN c.window_start ELSE to_timestamp(floor(extract(epoch FROM n.ts) / c.per_seconds) * c.per_seconds) END,
        window_starts = CASE WHEN c.rate IS NULL THEN c.window_starts
                             WHEN c.window_start = to_timestamp(floor(extract(epoch FROM n.ts) / c.per_seconds) * c.per_seconds) THEN c.window_starts + t.jobs
                             ELSE t.jobs END
    FROM (
        SELECT s.scope, count(*) AS jobs
        FROM claimed AS cl CROSS JOIN LATERAL unnest(ARRAY['tenant:' || cl.tenant, 'kind:' || cl.kind, 'queue:' || cl.queue, 'key:' || cl.concurrency_key]) AS s(scope)
        WHERE s.scope IS NOT NULL
        GROUP BY s.scope
    ) AS t, n
    WHERE c.scope = t.scope
),
opened AS (
    INSERT INTO job_attempts (job_id, claim, attempt, worker, due_at, started_at)
    SELECT id, claims, attempts, %(worker)s, run_after, started_at FROM claimed
)
SELECT c.*, h.priority AS head_priority, h.run_after AS head_run_after
FROM claimed AS c
LEFT JOIN LATERAL (
    SELECT h.priority, h.run_after
    FROM rivals AS t CROSS JOIN LATERAL unnest(t.hq, t.ht, t.hp, t.hr, t.hi) AS h(queue, tenant, priority, run_after, id)
    WHERE t.tenant = c.tenant AND h.tenant = c.tenant AND h.queue = c.queue
    LIMIT 1
) AS h ON true
ORDER BY c.id
