-- fragment: held_until
-- A held job's run_after (service.workflows.HELD_UNTIL, in UTC): never due, and the mark of a
-- job waiting for parents in the two partial indexes below. Written as a literal, not a
-- parameter, so the planner can prove those indexes' predicates from a statement's own.
'9999-12-31 00:00:00+00'::timestamptz

-- fragment: claimable(x)
-- A queued job (alias ``{x}``) not waiting for parents: ix_jobs_claimable's predicate. Why
-- the mark is run_after and not parents_pending = 0: a parent's completion that does not free
-- its child then changes no indexed column of the child (parents_pending is in no index), so
-- that update is HOT, and only the last parent's, which moves run_after, writes index
-- entries (migration 0016; docs/PERFORMANCE.md, "workflows").
{x}.state = 'queued' AND {x}.run_after < {{held_until}}

-- fragment: held(x)
-- A queued job (alias ``{x}``) waiting for parents: ix_jobs_held's predicate.
{x}.state = 'queued' AND {x}.run_after >= {{held_until}}

-- name: lock_parents
-- Workflows: the stored parents an enqueue names, locked in id order (no deadlock between two
-- enqueues naming the same parents) and their dependents_version bumped, in the enqueue's
-- transaction. Why the bump: a parent's completion that started before this transaction
-- commits and waited for the row lock sees the new version on the row it locked but not the
-- edges (its snapshot is older); it notices the difference and completes the parent again
-- behind a lock, so no child waits for a parent that already succeeded (complete_jobs).
-- The states come from the rows as locked: a parent that finished before this lock is seen
-- finished, and one that finishes after it waits for this transaction's commit. An unknown
-- id, or another tenant's, is simply not returned (the caller refuses the batch). Only parents
-- still queued or running are bumped: a finished one has no completion left to race, and a
-- terminal job changes only through replay (invariant 5). Their workflow_id, as locked, is what
-- service.workflows.workflow_ids reads (the enqueuing job of a handler's children is locked too).
WITH locked AS (
    SELECT id, tenant, state, cancelled_by, workflow_id FROM jobs WHERE id = ANY(:ids::uuid[]) ORDER BY id FOR UPDATE
),
bumped AS (
    UPDATE jobs AS j
    SET dependents_version = j.dependents_version + 1
    FROM locked
    WHERE j.id = locked.id AND locked.state IN ('queued', 'running')
)
SELECT id, tenant, state, cancelled_by, workflow_id FROM locked

-- name: open_transaction
-- Sent first on a caller's connection that has no transaction open yet (not autocommit): its
-- own implicit BEGIN then opens the caller's transaction, and the enqueue that follows runs
-- in a savepoint of it, so it is committed (or rolled back) by the caller, not here.
SELECT 1 AS opened

-- name: enqueue_dependents
-- A batch with dependencies (service.workflows decided each job's state, counter and edges):
-- the jobs and their edges in one statement. A job with unmet parents is held: run_after
-- {{held_until}} keeps it out of ix_jobs_claimable (``claimable``) and the autoscaler's count,
-- its own due time kept in due_after_parents.
-- A job whose parent already failed is born cancelled, its error naming the parent.
-- Each job's workflow_id is in :batch (service.workflows.workflow_ids); the stored jobs that had
-- none and join one (a parent named for the first time becomes its workflow's root, a handler's
-- job its follow-ups') get it in ``joined``: their rows are locked by lock_parents in this
-- transaction, and none of them is a row this statement inserts. A finished job gets it too: the
-- workflow it belongs to is a label, not a change of state (invariant 5 is about states).
WITH n AS (
    SELECT {{now}} AS ts
),
input AS (
    SELECT i.*, coalesce(i.run_after, n.ts + make_interval(secs => i.delay)) AS due, n.ts
    FROM jsonb_to_recordset(:batch::jsonb)
         AS i(id uuid, tenant text, queue text, kind text, payload jsonb, priority int, max_attempts int,
              max_attempts_default boolean, delay float8, run_after timestamptz, total int, concurrency_key text,
              idempotency_key text, state text, error text, cancelled_by uuid, parents_total int,
              parents_pending int, on_parent_failure text, dependents_version int, workflow_id uuid)
    CROSS JOIN n
),
joined AS (
    -- found by primary key (= ANY of an array: the planner knows its length), never by a scan
    -- of jobs, whatever the statistics say; nothing at all for a batch that names none.
    UPDATE jobs AS j
    SET workflow_id = w.workflow_id
    FROM unnest(:joined_ids::uuid[], :joined_workflows::uuid[]) AS w(id, workflow_id)
    WHERE j.id = ANY(:joined_ids::uuid[]) AND j.id = w.id AND j.workflow_id IS NULL
),
inserted AS (
    INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                      max_attempts_default, done, total, run_after, concurrency_key, idempotency_key,
                      created_at, updated_at, finished_at, error, cancelled_by, parents_total, parents_pending,
                      on_parent_failure, due_after_parents, dependents_version, workflow_id)
    SELECT i.id, i.tenant, i.queue, i.kind, i.payload, i.state, i.priority, 0, i.max_attempts,
           i.max_attempts_default, 0, i.total,
           CASE WHEN i.state = 'queued' AND i.parents_pending > 0 THEN {{held_until}} ELSE i.due END,
           i.concurrency_key, i.idempotency_key, i.ts, i.ts,
           CASE WHEN i.state = 'cancelled' THEN i.ts END, i.error, i.cancelled_by, i.parents_total,
           i.parents_pending, i.on_parent_failure, i.due, i.dependents_version, i.workflow_id
    FROM input AS i
    RETURNING id, tenant, state, parents_pending
),
edges AS (
    INSERT INTO job_edges (parent, child)
    SELECT e.parent, e.child FROM jsonb_to_recordset(:edges::jsonb) AS e(parent uuid, child uuid)
),{{tenant_counters(inserted)}}
SELECT count(*) AS inserted,
       CASE WHEN :notify AND count(*) FILTER (WHERE state = 'queued' AND parents_pending = 0) > 0
            THEN pg_notify('jobq_jobs', :wake_queues) END AS woke
FROM inserted

-- fragment: waiting(met)
-- The children in ``{met}`` (child, met: how many of its parents just ended) that still wait
-- for parents, each found by one primary-key lookup and locked, in id order, its state read
-- on the row as locked (OFFSET 0 keeps the check out of the lookup, as complete_jobs's
-- ``held``); the statement then updates them joined by id alone, behind KEY_LOOKUP_PLANNER (nested
-- loops of key lookups only). Why not join jobs to the children with these conditions: that
-- join is planned for a few children, and a plan made while few jobs waited read all of
-- ix_jobs_held (whose predicate the conditions matched) once per child: a fan-out of 10,000
-- took 4.4 s to release, now about 0.1 s (docs/PERFORMANCE.md, "workflows").
SELECT r.child, r.met, c.on_parent_failure
FROM {met} AS r
CROSS JOIN LATERAL (
    SELECT c.state, c.parents_pending, c.on_parent_failure FROM jobs AS c WHERE c.id = r.child FOR UPDATE OFFSET 0
) AS c
WHERE c.state = 'queued' AND c.parents_pending > 0

-- fragment: child_by_key(e)
-- The child of edge ``{e}`` by one primary-key lookup, unlocked: its state and what it does
-- when a parent fails, read in this statement's snapshot (``waiting`` says why not a join).
SELECT c.state, c.on_parent_failure FROM jobs AS c WHERE c.id = {e}.child OFFSET 0

-- name: read_jobs
-- The statuses of the jobs of a batch just stored (a batch with dependencies is read back:
-- its held and cancelled jobs are not what a plain enqueue's statuses assume).
SELECT {{status_columns}} FROM jobs WHERE id = ANY(:ids::uuid[])

-- name: lock_jobs
-- A completion that raced an enqueue of children (complete_jobs's ``raced``) is written again
-- behind this lock, in the same transaction: the completion's statement then starts after
-- the lock, its snapshot sees every edge committed before, and no new one can commit meanwhile.
SELECT id FROM jobs WHERE id = ANY(:ids::uuid[]) ORDER BY id FOR UPDATE

-- name: settle_dependents
-- A parent that failed or was cancelled (the jobs :ids, in the transaction that ended them,
-- whose rows it holds locked: no child can be added to them meanwhile, and this statement's
-- snapshot, later than the lock, sees every edge). Its dependents that wait with
-- on_parent_failure 'cancel' are cancelled, and theirs after them, all the way down
-- (``doomed``; each edge is visited once, so a wide graph costs its edges, not its paths),
-- each with an error naming the parent that ended it and cancelled_by naming the job whose
-- replay re-arms it. Dependents with on_parent_failure 'run' count the parent as settled
-- (``released``): the last settled parent makes them due.
-- Only a job this very transaction ended is settled (its row's xmin is this transaction's id):
-- the store sends this statement after every fail, cancel, release and cancel acknowledged,
-- also one that matched nothing (a stale token, a job already ended), and a job's dependents
-- are settled once, when it ends (a 'run' child counts each parent once).
WITH RECURSIVE n AS (
    SELECT {{now}} AS ts
),
ended AS (
    SELECT j.id, CASE WHEN j.state = 'failed' THEN 'failed' ELSE 'was cancelled' END AS how,
           coalesce(j.cancelled_by, j.id) AS root
    FROM jobs AS j
    WHERE j.id = ANY(:ids::uuid[]) AND j.state IN ('failed', 'cancelled') AND j.dependents_version <> 0
      AND j.xmin = (pg_current_xact_id()::text::bigint % 4294967296)::text::xid
),
doomed(id, parent, how, root) AS (
    SELECT e.child, e.parent, en.how, en.root
    FROM ended AS en JOIN job_edges AS e ON e.parent = en.id
    CROSS JOIN LATERAL ({{child_by_key(e)}}) AS c
    WHERE c.state = 'queued' AND c.on_parent_failure = 'cancel'
    UNION
    SELECT e.child, e.parent, 'was cancelled', d.root
    FROM doomed AS d JOIN job_edges AS e ON e.parent = d.id
    CROSS JOIN LATERAL ({{child_by_key(e)}}) AS c
    WHERE c.state = 'queued' AND c.on_parent_failure = 'cancel'
),
-- Each doomed job once, locked and still queued as locked (a recursive query cannot lock).
dooming AS (
    SELECT d.id, d.parent, d.how, d.root
    FROM (SELECT DISTINCT ON (id) id, parent, how, root FROM doomed ORDER BY id, parent) AS d
    CROSS JOIN LATERAL (SELECT c.state FROM jobs AS c WHERE c.id = d.id FOR UPDATE OFFSET 0) AS c
    WHERE c.state = 'queued'
),
cancelled AS (
    UPDATE jobs AS j
    SET state = 'cancelled', error = 'cancelled: parent job ' || d.parent || ' ' || d.how,
        cancelled_by = d.root, finished_at = n.ts, updated_at = n.ts
    FROM dooming AS d, n
    WHERE j.id = d.id
    RETURNING j.id, {{notify_changed}}
),
met AS (
    SELECT e.child, count(*) AS met
    FROM job_edges AS e
    WHERE e.parent IN (SELECT id FROM ended UNION SELECT id FROM doomed)
    GROUP BY e.child
    ORDER BY e.child
),
freeing AS ({{waiting(met)}}),
released AS (
    UPDATE jobs AS c
    SET parents_pending = c.parents_pending - r.met,
        run_after = CASE WHEN c.parents_pending = r.met THEN greatest(n.ts, coalesce(c.due_after_parents, n.ts))
                         ELSE c.run_after END,
        updated_at = n.ts
    FROM freeing AS r, n
    WHERE c.id = r.child AND r.on_parent_failure = 'run'
    RETURNING c.id, c.queue, c.parents_pending
)
SELECT (SELECT count(*) FROM cancelled) AS cancelled,
       (SELECT count(*) FROM released) AS released,
       CASE WHEN :notify AND EXISTS (SELECT 1 FROM released WHERE parents_pending = 0)
            THEN pg_notify('jobq_jobs', (SELECT string_agg(DISTINCT queue, ',') FROM released
                                         WHERE parents_pending = 0)) END AS woke

-- name: rearm_candidates
-- Replay's second statement, in its transaction: the jobs that the replayed jobs' failure
-- cancelled (cancelled_by, transitively), replayed jobs that have parents of their own, and
-- the queued children of both (a 'run' child released by its parent's end waits for it again
-- when the parent is replayed or re-armed: a queued job counts exactly its unfinished
-- parents), with their parents. The parents outside that set are locked and their dependents_version
-- bumped, as an enqueue's (lock_parents): a parent completing meanwhile that waited for the
-- lock completes again behind one and sees these children queued. The states are the rows'
-- as locked, and each parent outside the set says whose replay re-arms it (root).
-- service.workflows.rearm decides which jobs wait again, and for how many parents.
WITH cancelled AS (
    SELECT j.id FROM jobs AS j WHERE j.cancelled_by = ANY(:ids::uuid[]) AND j.state = 'cancelled'
),
candidates AS (
    SELECT j.id, j.tenant, j.state, j.error, j.attempts, j.on_parent_failure, j.cancelled_by
    FROM jobs AS j
    WHERE j.id IN (SELECT id FROM cancelled)
       OR (j.id = ANY(:ids::uuid[]) AND j.parents_total > 0 AND j.state = 'queued')
       OR (j.state = 'queued'
           AND j.id IN (SELECT e.child FROM job_edges AS e
                        WHERE e.parent = ANY(:ids::uuid[]) OR e.parent IN (SELECT id FROM cancelled)))
),
edges AS (
    SELECT e.child, e.parent FROM job_edges AS e WHERE e.child IN (SELECT id FROM candidates)
),
others AS (
    SELECT p.id, p.state, p.cancelled_by FROM jobs AS p
    WHERE p.id IN (SELECT parent FROM edges) AND p.id NOT IN (SELECT id FROM candidates)
    ORDER BY p.id
    FOR UPDATE
),
bumped AS (
    UPDATE jobs AS p
    SET dependents_version = p.dependents_version + 1
    FROM others AS o
    WHERE p.id = o.id AND o.state IN ('queued', 'running')
)
SELECT c.id, c.tenant, c.state, c.error, c.attempts, c.on_parent_failure, c.cancelled_by,
       coalesce(json_agg(json_build_object('id', e.parent, 'state', coalesce(o.state, k.state),
                                           'root', coalesce(o.cancelled_by, o.id)))
                FILTER (WHERE e.parent IS NOT NULL), '[]') AS parents
FROM candidates AS c
LEFT JOIN edges AS e ON e.child = c.id
LEFT JOIN others AS o ON o.id = e.parent
LEFT JOIN candidates AS k ON k.id = e.parent
GROUP BY c.id, c.tenant, c.state, c.error, c.attempts, c.on_parent_failure, c.cancelled_by

-- name: rearm_jobs
-- The jobs service.workflows.rearm chose, back to queued and waiting for :batch's count of
-- parents (due now when none); the replay of each one a failure had cancelled is recorded in
-- job_replays, naming the job whose replay re-armed it (invariant 5). Each one's
-- dependents_version grows, so that its completion (or end) looks for children: a child
-- submitted while it was cancelled did not bump it (lock_parents leaves a finished parent alone).
WITH n AS (
    SELECT {{now}} AS ts
),
input AS (
    SELECT * FROM jsonb_to_recordset(:batch::jsonb) AS i(id uuid, pending int)
),
before AS (
    SELECT j.id, j.state, j.error, j.attempts, j.cancelled_by FROM jobs AS j WHERE j.id IN (SELECT id FROM input)
),
rearmed AS (
    UPDATE jobs AS j
    SET state = 'queued', cancelled_by = NULL, finished_at = NULL, cancel_requested = false,
        -- a cancelled job starts afresh; a queued one (waiting for a retry, say) keeps its own
        error = CASE WHEN j.state = 'cancelled' THEN NULL ELSE j.error END,
        attempts = CASE WHEN j.state = 'cancelled' THEN 0 ELSE j.attempts END,
        parents_pending = i.pending,
        dependents_version = j.dependents_version + 1,
        run_after = CASE WHEN i.pending > 0 THEN {{held_until}}
                         ELSE greatest(n.ts, coalesce(j.due_after_parents, n.ts)) END,
        updated_at = n.ts
    FROM input AS i, n
    WHERE j.id = i.id
    RETURNING j.id, j.tenant, {{notify_changed}}
),{{tenant_counters(rearmed)}},
recorded AS (
    INSERT INTO job_replays (job_id, replayed_at, replayed_by, previous_state, previous_error, previous_attempts)
    SELECT b.id, n.ts, :by || ' (re-armed: job ' || b.cancelled_by || ' was replayed)', b.state, b.error, b.attempts
    FROM before AS b, n
    WHERE b.state = 'cancelled'
)
SELECT id FROM rearmed ORDER BY id

-- name: hold_cancelled
-- Replay's last statement, in its transaction: the candidates service.workflows.rearm left
-- cancelled (another parent of theirs ended badly) now name that parent in their error, and in
-- cancelled_by the job whose replay re-arms them (service.workflows.still_cancelled), so the
-- replay of their last failed parent re-arms them. Still cancelled: part of the replay that
-- re-armed their first failed parent, which job_replays records (invariant 5).
UPDATE jobs AS j
SET error = i.error, cancelled_by = i.cancelled_by, updated_at = {{now}}
FROM jsonb_to_recordset(:batch::jsonb) AS i(id uuid, error text, cancelled_by uuid)
WHERE j.id = i.id AND j.state = 'cancelled'
RETURNING j.id, {{notify_changed}}

-- name: parent_results
-- ctx.parent_results(): a job's parents and their results, in one query (the edges of the
-- child, each parent's result through its result_id), in the order the parents were created.
SELECT p.id, p.state, r.body
FROM job_edges AS e
JOIN jobs AS p ON p.id = e.parent
LEFT JOIN job_results AS r ON r.id = p.result_id
WHERE e.child = :job_id
ORDER BY p.id

-- name: job_parents
-- A job's parents with their states, a page at a time in id order (the job itself is read
-- first, scoped to the tenant: another tenant's job is not found).
SELECT p.id, p.kind, p.state
FROM job_edges AS e JOIN jobs AS p ON p.id = e.parent
WHERE e.child = :job_id AND (:after::uuid IS NULL OR e.parent > :after::uuid)
ORDER BY e.parent
LIMIT :limit

-- name: job_children
-- A job's children with their states, a page at a time in id order.
SELECT c.id, c.kind, c.state
FROM job_edges AS e JOIN jobs AS c ON c.id = e.child
WHERE e.parent = :job_id AND (:after::uuid IS NULL OR e.child > :after::uuid)
ORDER BY e.child
LIMIT :limit

-- name: unfinished_parents
-- explain's "waiting for N of M parents": the parents still queued or running, a few by id.
SELECT p.id, p.kind, p.state
FROM job_edges AS e JOIN jobs AS p ON p.id = e.parent
WHERE e.child = :job_id AND p.state IN ('queued', 'running')
ORDER BY e.parent
LIMIT :limit
