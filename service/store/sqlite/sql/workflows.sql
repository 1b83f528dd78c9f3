-- fragment: claimable(x)
-- A queued job (alias ``{x}``) not waiting for parents: ix_jobs_claimable's predicate here
-- (PostgreSQL marks it by run_after, for HOT updates, which SQLite does not have).
{x}.state = 'queued' AND {x}.parents_pending = 0

-- fragment: held(x)
-- A queued job (alias ``{x}``) waiting for parents: ix_jobs_held's predicate.
{x}.state = 'queued' AND {x}.parents_pending > 0

-- name: lock_parents
-- Workflows: the stored parents an enqueue names, read in its write transaction (BEGIN
-- IMMEDIATE: no completion can run until it commits). Unknown ids are not returned. Their
-- workflow_id is what service.workflows.workflow_ids reads (a handler's job is read with them).
SELECT id, tenant, state, cancelled_by, workflow_id FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))

-- name: bump_parents
-- Once the batch is wired: the parents (:ids) still queued or running get their
-- dependents_version grown, so that their completions look for children (release_children);
-- and the stored jobs that had no workflow and join one (:joined, id -> workflow id: a parent
-- named for the first time becomes its workflow's root, a handler's job its follow-ups') get
-- it. A finished parent's state is left alone (invariant 5); the workflow it belongs to is a
-- label, not a state, and it gets that too. One statement for the batch, not one per job.
-- Also the parents a replay's re-armed jobs wait for again (rearm_dependents, :joined empty).
UPDATE jobs
SET dependents_version = dependents_version
        + CASE WHEN id IN (SELECT value FROM json_each(:ids)) AND state IN ('queued', 'running') THEN 1 ELSE 0 END,
    workflow_id = coalesce(workflow_id, (SELECT value FROM json_each(:joined) WHERE key = jobs.id))
WHERE (id IN (SELECT value FROM json_each(:ids)) AND state IN ('queued', 'running'))
   OR id IN (SELECT key FROM json_each(:joined))

-- name: enqueue_dependent
-- One job of a batch with dependencies, as service.workflows wired it: held (run_after
-- :held_until, never due, its own due time in due_after_parents) while parents are unmet,
-- or born cancelled when a parent already failed.
INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                  max_attempts_default, done, total, run_after, concurrency_key, idempotency_key,
                  created_at, updated_at, finished_at, error, cancelled_by, parents_total, parents_pending,
                  on_parent_failure, due_after_parents, dependents_version, workflow_id)
SELECT :id, :tenant, :queue, :kind, :payload, :state, :priority, 0, :max_attempts,
       :max_attempts_default, 0, :total,
       CASE WHEN :state = 'queued' AND :parents_pending > 0 THEN :held_until ELSE due END,
       :concurrency_key, :idempotency_key, :now, :now,
       CASE WHEN :state = 'cancelled' THEN :now END, :error, :cancelled_by, :parents_total, :parents_pending,
       :on_parent_failure, due, :dependents_version, :workflow_id
FROM (SELECT coalesce(:run_after, strftime('%Y-%m-%d %H:%M:%f', :now, :delay || ' seconds')) AS due)

-- name: insert_edge
-- One dependency: :child waits for :parent.
INSERT INTO job_edges (parent, child) VALUES (:parent, :child)

-- name: read_jobs
-- The statuses of the jobs of a batch just stored.
SELECT {{status_columns}} FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))

-- name: release_children
-- A parent succeeded (in the transaction that completed it): its children count one parent
-- less, and one whose last parent this was gets its own due time back.
UPDATE jobs
SET parents_pending = parents_pending - 1,
    run_after = CASE WHEN parents_pending = 1 THEN max(:now, coalesce(due_after_parents, :now)) ELSE run_after END,
    updated_at = :now
WHERE id IN (SELECT child FROM job_edges WHERE parent = :parent) AND state = 'queued' AND parents_pending > 0

-- name: doomed_dependents
-- A parent that failed or was cancelled (:ids, in the transaction that ended them): its
-- dependents with on_parent_failure 'cancel', theirs after them, all the way down (each edge
-- once), with the parent that ends each and the job whose replay re-arms it.
WITH RECURSIVE ended AS (
    SELECT id, CASE WHEN state = 'failed' THEN 'failed' ELSE 'was cancelled' END AS how,
           coalesce(cancelled_by, id) AS root
    FROM jobs
    WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('failed', 'cancelled') AND dependents_version <> 0
),
doomed(id, parent, how, root) AS (
    SELECT e.child, e.parent, en.how, en.root
    FROM ended AS en JOIN job_edges AS e ON e.parent = en.id JOIN jobs AS c ON c.id = e.child
    WHERE c.state = 'queued' AND c.on_parent_failure = 'cancel'
    UNION
    SELECT e.child, e.parent, 'was cancelled', d.root
    FROM doomed AS d JOIN job_edges AS e ON e.parent = d.id JOIN jobs AS c ON c.id = e.child
    WHERE c.state = 'queued' AND c.on_parent_failure = 'cancel'
)
SELECT id, min(parent) AS parent, how, root, 0 AS direct FROM doomed GROUP BY id
UNION ALL
SELECT id, NULL, how, root, 1 FROM ended

-- name: cancel_dependent
-- One dependent cancelled by its parent's end, the error naming that parent.
UPDATE jobs
SET state = 'cancelled', error = 'cancelled: parent job ' || :parent || ' ' || :how, cancelled_by = :root,
    finished_at = :now, updated_at = :now
WHERE id = :id AND state = 'queued'

-- name: release_run_anyway
-- Dependents with on_parent_failure 'run' of the parents that ended (:ids): each such parent
-- counts as settled; the last settled one makes the job due.
WITH r AS (
    SELECT child, count(*) AS met FROM job_edges
    WHERE parent IN (SELECT value FROM json_each(:ids))
    GROUP BY child
)
UPDATE jobs
SET parents_pending = parents_pending - (SELECT met FROM r WHERE r.child = jobs.id),
    run_after = CASE WHEN parents_pending = (SELECT met FROM r WHERE r.child = jobs.id)
                     THEN max(:now, coalesce(due_after_parents, :now)) ELSE run_after END,
    updated_at = :now
WHERE id IN (SELECT child FROM r) AND state = 'queued' AND on_parent_failure = 'run' AND parents_pending > 0

-- name: rearm_candidates
-- Replay: the jobs the replayed jobs' failure cancelled, replayed jobs with parents, and the
-- queued children of both (a 'run' child released by its parent's end waits for it again, when
-- the parent is replayed or re-armed: a queued job counts exactly its unfinished parents).
WITH replayed AS (SELECT value AS id FROM json_each(:ids)),
cancelled AS (SELECT id FROM jobs WHERE cancelled_by IN (SELECT id FROM replayed) AND state = 'cancelled')
SELECT id, state, error, attempts, on_parent_failure, cancelled_by, tenant FROM jobs
WHERE id IN (SELECT id FROM cancelled)
   OR (id IN (SELECT id FROM replayed) AND parents_total > 0 AND state = 'queued')
   OR (state = 'queued'
       AND id IN (SELECT child FROM job_edges WHERE parent IN (SELECT id FROM replayed UNION ALL SELECT id FROM cancelled)))

-- name: parents_of
-- A job's parents and their states (re-arming counts them afresh), each with the job whose
-- replay re-arms it (root: its cancelled_by, or itself).
SELECT e.parent AS id, p.state, coalesce(p.cancelled_by, p.id) AS root
FROM job_edges AS e JOIN jobs AS p ON p.id = e.parent WHERE e.child = :id

-- name: rearm_job
-- One job back to waiting for its parents (or due now when none is unmet).
UPDATE jobs
SET state = 'queued', cancelled_by = NULL, finished_at = NULL, cancel_requested = 0,
    error = CASE WHEN state = 'cancelled' THEN NULL ELSE error END,
    attempts = CASE WHEN state = 'cancelled' THEN 0 ELSE attempts END,
    parents_pending = :pending,
    run_after = CASE WHEN :pending > 0 THEN :held_until ELSE max(:now, coalesce(due_after_parents, :now)) END,
    updated_at = :now
WHERE id = :id

-- name: hold_cancelled
-- A candidate the replay left cancelled (another parent of its ended badly): its error names
-- that parent, cancelled_by the job whose replay re-arms it (service.workflows.still_cancelled).
-- Still cancelled: part of the replay, which job_replays records (invariant 5).
UPDATE jobs SET error = :error, cancelled_by = :cancelled_by, updated_at = :now
WHERE id = :id AND state = 'cancelled'

-- name: parent_results
-- ctx.parent_results(): a job's parents and their results in one query, oldest parent first.
SELECT p.id, p.state, r.body
FROM job_edges AS e
JOIN jobs AS p ON p.id = e.parent
LEFT JOIN job_results AS r ON r.id = p.result_id
WHERE e.child = :job_id
ORDER BY p.id

-- name: job_parents
-- A job's parents with their states, a page at a time in id order.
SELECT p.id, p.kind, p.state
FROM job_edges AS e JOIN jobs AS p ON p.id = e.parent
WHERE e.child = :job_id AND (:after IS NULL OR e.parent > :after)
ORDER BY e.parent
LIMIT :limit

-- name: job_children
-- A job's children with their states, a page at a time in id order.
SELECT c.id, c.kind, c.state
FROM job_edges AS e JOIN jobs AS c ON c.id = e.child
WHERE e.parent = :job_id AND (:after IS NULL OR e.child > :after)
ORDER BY e.child
LIMIT :limit

-- name: unfinished_parents
-- explain's "waiting for N of M parents": the parents still queued or running, a few by id.
SELECT p.id, p.kind, p.state
FROM job_edges AS e JOIN jobs AS p ON p.id = e.parent
WHERE e.child = :job_id AND p.state IN ('queued', 'running')
ORDER BY e.parent
LIMIT :limit
