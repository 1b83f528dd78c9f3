"""Limits on PostgreSQL: an operator's change of a limit and the counters it governs
(one transaction under LOCK_COUNTERS), the counters' usage, and a job's facts for
'why is it not running?'."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from service.explain import SHOWN_RUNNING_IDS, JobFacts
from service.limits import Limit, ScopeUsage, check_scope, job_scopes
from service.store import checks
from service.store.postgres.connection import READ
from service.store.postgres.queries import EXPLAIN_FACTS, LIST_LIMITS, RUNNING_IN_SCOPE, SCOPE_USAGE
from service.store.postgres.reads import Reads
from service.store.postgres.workers import Workers
from service.store.rows import job_facts, limit_row, scope_usage_row

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


class Limits(Reads, Workers):
    """set_limit, delete_limit, list_limits, scope_usage, explain_facts."""

    def set_limit(self, limit: Limit) -> None:
        self._change_limit(SET_LIMIT, checks.limit_args(limit))

    def delete_limit(self, scope: str) -> None:
        checks.require_deleted(self._change_limit(DELETE_LIMIT, {"scope": check_scope(scope)}), scope)

    def _change_limit(self, statement: str, values: dict[str, Any]) -> bool:
        """Change a limit and the counters it governs in one transaction (LOCK_COUNTERS says why)."""
        params = self._params(**values)

        def run() -> bool:
            with self._connection() as conn, conn.transaction():
                conn.execute(LOCK_COUNTERS)
                changed = conn.execute(statement, params).rowcount > 0
                conn.execute(REFRESH_COUNTERS, params)
                return changed

        return self._retrying(run)

    def list_limits(self, tenant: str | None = None) -> list[Limit]:
        return [limit_row(row) for row in self._fetchall(LIST_LIMITS, self._params(tenant=tenant))]

    def scope_usage(self, scopes: Sequence[str] | None = None) -> list[ScopeUsage]:
        rows = self._fetchall(SCOPE_USAGE, self._params(scopes=list(scopes) if scopes is not None else None))
        return [scope_usage_row(row, READ) for row in rows]

    def explain_facts(self, job_id: uuid.UUID, tenant: str | None = None, *, workers_seen_within: float) -> JobFacts:
        status = self.get(job_id, tenant)
        facts = self._fetchone(
            EXPLAIN_FACTS,
            self._params(
                job_id=job_id,
                queue=status.queue,
                tenant=status.tenant,
                priority=status.priority,
                run_after=status.run_after,
            ),
        )
        assert facts is not None  # one row, always
        usage = self.scope_usage(job_scopes(status.tenant, status.kind, status.queue, status.concurrency_key))

        def running_ids(scope: str) -> list[Any]:
            rows = self._fetchall(RUNNING_IN_SCOPE, self._params(tenant=tenant, scope=scope, limit=SHOWN_RUNNING_IDS))
            return [row["id"] for row in rows]

        return job_facts(status, facts, facts["now"], READ, usage, running_ids, self.list_workers(workers_seen_within))


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
