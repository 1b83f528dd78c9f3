"""The autoscaler's number: jobq_slots_needed(queues, kinds), and the index of due jobs it reads (PostgreSQL).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

KEDA (deploy/k8s/worker-scaledobject.yaml) asked the database how many jobs were queued in a
hard-coded queue: it counted jobs of kinds no worker runs, and jobs a full scope (``jobq limits``)
keeps waiting, so it kept pods up that could take nothing. jobq owns the number now:

    SELECT jobq_slots_needed(ARRAY['default'], ARRAY['classify', 'sleep'])

answers the slots that work of those queues and kinds needs right now: the running jobs (so a
fleet busy with long jobs is not scaled down under them), plus the due queued jobs that a free
slot could take, where a limited scope counts at most its room (concurrency left, and starts left
in its rate window). Jobs sharing a scope count its room together, dimension by dimension
(tenant, kind, queue, concurrency key), and the answer is the smallest of the four sums: exact
when limits hold on one dimension, an upper bound when they cross (never fewer slots than can run).

- ``ix_jobs_due``: queued rows by queue, kind and due time, so the count reads only the due
  entries of the asked queues and kinds: delayed jobs and retry backoff are never visited.
- ``jobq_slots_needed``: SECURITY DEFINER with a fixed search_path, so a role that may only
  EXECUTE it (deploy/scaler.sql) reads the number and no table. EXECUTE is revoked from PUBLIC.

SQLite needs no scaler (one host, no KEDA): this revision changes nothing there.

Frozen: the room of a scope_counters row below is a copy of service/store/postgres/statements.py
(_room) as it stood at 5fa919c; the import contract in pyproject.toml keeps migrations from
importing service.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# A new index and a new function only: release 0009's statements stay valid (rollbacks, 0011).
compatible_with_previous = True

UNLIMITED = 2147483647

SLOTS_NEEDED = f"""
CREATE FUNCTION jobq_slots_needed(queues text[], kinds text[]) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
AS $$
WITH due AS (
    -- Due queued jobs of these queues and kinds, one row per set of scopes (ix_jobs_due).
    SELECT row_number() OVER () AS grp, j.tenant, j.queue, j.kind, j.concurrency_key, count(*) AS jobs
    FROM jobs AS j
    WHERE j.state = 'queued' AND j.queue = ANY(queues) AND j.kind = ANY(kinds) AND j.run_after <= now()
    GROUP BY j.tenant, j.queue, j.kind, j.concurrency_key
),
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

# The tables it reads are found in jobq's schema only, whoever calls it (a SECURITY DEFINER
# function must not follow the caller's search_path).
PIN_SEARCH_PATH = """
DO $$ BEGIN
    EXECUTE format('ALTER FUNCTION jobq_slots_needed(text[], text[]) SET search_path = %I, pg_temp',
                   current_schema());
END $$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_index("ix_jobs_due", "jobs", ["queue", "kind", "run_after"], postgresql_where=sa.text("state = 'queued'"))
    op.execute(SLOTS_NEEDED)
    op.execute(PIN_SEARCH_PATH)
    op.execute("REVOKE EXECUTE ON FUNCTION jobq_slots_needed(text[], text[]) FROM PUBLIC")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION jobq_slots_needed(text[], text[])")
    op.drop_index("ix_jobs_due", table_name="jobs")
