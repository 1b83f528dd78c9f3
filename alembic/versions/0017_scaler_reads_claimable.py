"""The autoscaler's count reads ix_jobs_claimable, and ix_jobs_due is dropped (PostgreSQL; issue 27).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05

``ix_jobs_due`` (queue, kind, run_after), every queued row, was made for jobq_slots_needed (0010),
called by KEDA every few seconds. It cost more than that count saved:

- **The claim read it.** Its predicate (``state = 'queued'``) follows from the claim's, and behind
  a pinned xmin horizon autovacuum's ANALYZE saw a drained queue among thousands of jobs just
  finished, under which every probe of the claim looked like one row whichever index it read.
  The worker's connections planned the claim again after that ANALYZE and read ix_jobs_due, which
  has neither tenant nor priority: every probe read every entry of the queue, dead ones
  included, and sorted them (250 ms a claim, 0.83x completions while pinned:
  docs/PERFORMANCE.md, "bloat"). CLAIM_PLANNER now also turns sorts off, so only
  ix_jobs_claimable gives the claim its order; the idle poll, which runs without it, had the
  same choice and read it too.
- **Every enqueue and every retry wrote an entry in it**, beside ix_jobs_claimable's.

The count reads ix_jobs_claimable instead, and still never visits a delayed job: that index
orders each queue by tenant, then priority, then run_after, so the due jobs of one (tenant,
priority) group are the first entries of its range. The count walks the groups (a loose index
scan: one descent to the next group, past none of a group's delayed entries) and reads each
group's due prefix. What it gives up is skipping other kinds' due jobs in the index: they are
visited and filtered.

Compatible with the previous release: no statement of it names the index, and its count is
replaced here by one that answers the same.

Frozen: the function below is 0010's with that one condition added; imports only alembic and
sqlalchemy.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None
compatible_with_previous = True

UNLIMITED = 2147483647
HELD_UNTIL = "'9999-12-31 00:00:00+00'::timestamptz"


def _slots_needed(due: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION jobq_slots_needed(queues text[], kinds text[]) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
AS $${due}
scoped AS (
    -- Each group in each of its four scopes, with the scope's room ({UNLIMITED}: no limit).
    -- Every limited scope has a scope_counters row (a tenant under tenant:* one of its own).
    SELECT d.grp, s.dimension, s.scope, d.jobs,
           CASE WHEN c.scope IS NULL THEN {UNLIMITED} ELSE greatest(0, least(
               coalesce(c.concurrency - c.running, {UNLIMITED}),
               CASE WHEN c.rate IS NULL THEN {UNLIMITED}
                    WHEN c.window_start = to_timestamp(floor(extract(epoch FROM now()) / c.per_seconds)
                                                       * c.per_seconds)
                    THEN c.rate - c.window_starts
                    ELSE c.rate END)) END AS room
    FROM due AS d
    CROSS JOIN LATERAL (VALUES (1, 'tenant:' || d.tenant), (2, 'kind:' || d.kind), (3, 'queue:' || d.queue),
                               (4, 'key:' || d.concurrency_key)) AS s (dimension, scope)
    LEFT JOIN scope_counters AS c ON c.scope = s.scope
),
runnable AS (
    -- A group counts at most the room of its tightest scope.
    SELECT grp, least(min(jobs), min(room)) AS jobs FROM scoped GROUP BY grp
),
per_scope AS (
    -- Groups sharing a scope count at most its room together (NULL keys: each group its own).
    SELECT s.dimension, least(sum(r.jobs), min(s.room)) AS jobs
    FROM scoped AS s JOIN runnable AS r USING (grp)
    GROUP BY s.dimension, s.scope, CASE WHEN s.scope IS NULL THEN s.grp END
)
SELECT (SELECT count(*) FROM jobs
        WHERE state = 'running' AND queue = ANY(queues) AND kind = ANY(kinds))
     + coalesce((SELECT min(total) FROM (SELECT sum(jobs) AS total FROM per_scope GROUP BY dimension) AS t), 0)::bigint
$$
"""


# Each queue's (tenant, priority) groups in ix_jobs_claimable, walked one descent at a time, and
# the due jobs of each group: the first entries of its range (a job waiting for parents is never due).
DUE_CLAIMABLE = f"""
WITH RECURSIVE queue AS (
    SELECT DISTINCT unnest(queues) AS name
),
grp(queue, tenant, priority) AS (
    SELECT first.queue, first.tenant, first.priority
    FROM queue AS q
    CROSS JOIN LATERAL (
        SELECT j.queue, j.tenant, j.priority FROM jobs AS j
        WHERE j.state = 'queued' AND j.run_after < {HELD_UNTIL} AND j.queue = q.name
        ORDER BY j.tenant, j.priority DESC
        LIMIT 1
    ) AS first
    UNION ALL
    SELECT next.queue, next.tenant, next.priority
    FROM grp AS g
    CROSS JOIN LATERAL (
        (SELECT j.queue, j.tenant, j.priority FROM jobs AS j
         WHERE j.state = 'queued' AND j.run_after < {HELD_UNTIL} AND j.queue = g.queue
           AND j.tenant = g.tenant AND j.priority < g.priority
         ORDER BY j.priority DESC
         LIMIT 1)
        UNION ALL
        (SELECT j.queue, j.tenant, j.priority FROM jobs AS j
         WHERE j.state = 'queued' AND j.run_after < {HELD_UNTIL} AND j.queue = g.queue AND j.tenant > g.tenant
         ORDER BY j.tenant, j.priority DESC
         LIMIT 1)
        LIMIT 1
    ) AS next
),
due AS (
    -- Due queued jobs of these queues and kinds, one row per set of scopes.
    SELECT row_number() OVER () AS grp, j.tenant, j.queue, j.kind, j.concurrency_key, count(*) AS jobs
    FROM grp AS g
    CROSS JOIN LATERAL (
        -- one group's range, read from its start to its first delayed entry (OFFSET 0: a join
        -- planned apart would read every due entry of the queue and hash them)
        SELECT j.tenant, j.queue, j.kind, j.concurrency_key FROM jobs AS j
        WHERE j.state = 'queued' AND j.run_after < {HELD_UNTIL} AND j.queue = g.queue AND j.tenant = g.tenant
          AND j.priority = g.priority AND j.run_after <= now() AND j.kind = ANY(kinds)
        OFFSET 0
    ) AS j
    GROUP BY j.tenant, j.queue, j.kind, j.concurrency_key
),"""
DUE_BEFORE = """
WITH due AS (
    -- Due queued jobs of these queues and kinds, one row per set of scopes (ix_jobs_due).
    SELECT row_number() OVER () AS grp, j.tenant, j.queue, j.kind, j.concurrency_key, count(*) AS jobs
    FROM jobs AS j
    WHERE j.state = 'queued' AND j.queue = ANY(queues) AND j.kind = ANY(kinds) AND j.run_after <= now()
    GROUP BY j.tenant, j.queue, j.kind, j.concurrency_key
),"""

# CREATE OR REPLACE keeps the owner and the grants, not the settings: the search_path is pinned again.
PIN_SEARCH_PATH = """
DO $$ BEGIN
    EXECUTE format('ALTER FUNCTION jobq_slots_needed(text[], text[]) SET search_path = %I, pg_temp',
                   current_schema());
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_slots_needed(DUE_CLAIMABLE))
    op.execute(PIN_SEARCH_PATH)
    with op.get_context().autocommit_block():
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_jobs_due")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    with op.get_context().autocommit_block():
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_jobs_due")  # a build interrupted before
        op.create_index(
            "ix_jobs_due",
            "jobs",
            ["queue", "kind", "run_after"],
            postgresql_where=sa.text("state = 'queued'"),
            postgresql_concurrently=True,
        )
    op.execute(_slots_needed(DUE_BEFORE))
    op.execute(PIN_SEARCH_PATH)
