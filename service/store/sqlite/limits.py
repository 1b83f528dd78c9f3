"""Limits on SQLite: an operator's change of a limit and the counters it governs (one
write transaction), the counters' usage, and a job's facts for 'why is it not running?'."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from typing import Any

from service.explain import SHOWN_RUNNING_IDS, JobFacts
from service.limits import Limit, ScopeUsage, check_scope, job_scopes
from service.store import checks
from service.store.rows import job_facts, limit_row, scope_usage_row
from service.store.sqlite.connection import READ
from service.store.sqlite.queries import EXPLAIN_FACTS, LIST_LIMITS, RUNNING_IN_SCOPE, SCOPE_USAGE
from service.store.sqlite.reads import Reads
from service.store.sqlite.timestamps import from_text, to_text
from service.store.sqlite.workers import Workers

# -- limits (an operator's change, one write transaction) --
SET_LIMIT = """
INSERT INTO limits (scope, concurrency, rate, per_seconds, weight, updated_at)
VALUES (:scope, :concurrency, :rate, :per_seconds, :weight, :now)
ON CONFLICT (scope) DO UPDATE
SET concurrency = excluded.concurrency, rate = excluded.rate, per_seconds = excluded.per_seconds,
    weight = excluded.weight, updated_at = excluded.updated_at
"""


DELETE_LIMIT = "DELETE FROM limits WHERE scope = :scope RETURNING scope"


# The scopes a change touches: the one named, or for tenant:* every tenant with a counter
# or active jobs; each with its limit in force (a tenant's own, else tenant:*'s).
CHANGED_SCOPES = """
WITH wanted AS (
    SELECT :scope AS scope WHERE :scope <> 'tenant:*'
    UNION SELECT scope FROM scope_counters WHERE :scope = 'tenant:*' AND scope LIKE 'tenant:%'
    UNION SELECT DISTINCT 'tenant:' || tenant FROM jobs WHERE :scope = 'tenant:*' AND state IN ('queued', 'running')
)
SELECT w.scope,
       coalesce(own.concurrency, d.concurrency) AS concurrency,
       coalesce(own.rate, d.rate) AS rate,
       coalesce(own.per_seconds, d.per_seconds) AS per_seconds,
       (SELECT count(*) FROM jobs AS j WHERE j.state = 'running'
          AND w.scope IN ('tenant:' || j.tenant, 'kind:' || j.kind, 'queue:' || j.queue,
                          'key:' || j.concurrency_key)) AS running
FROM wanted AS w
LEFT JOIN limits AS own ON own.scope = w.scope
LEFT JOIN limits AS d ON d.scope = 'tenant:*' AND w.scope LIKE 'tenant:%'
"""


DROP_COUNTER = "DELETE FROM scope_counters WHERE scope = :scope"


PUT_COUNTER = """
INSERT INTO scope_counters AS c (scope, running, concurrency, rate, per_seconds)
VALUES (:scope, :running, :concurrency, :rate, :per_seconds)
ON CONFLICT (scope) DO UPDATE
SET running = excluded.running, concurrency = excluded.concurrency, rate = excluded.rate,
    per_seconds = excluded.per_seconds,
    window_start = CASE WHEN c.rate IS excluded.rate AND c.per_seconds IS excluded.per_seconds
                        THEN c.window_start END,
    window_starts = CASE WHEN c.rate IS excluded.rate AND c.per_seconds IS excluded.per_seconds
                         THEN c.window_starts ELSE 0 END
"""


class Limits(Reads, Workers):
    """set_limit, delete_limit, list_limits, scope_usage, explain_facts."""

    def set_limit(self, limit: Limit) -> None:
        with self._write() as (conn, now):
            conn.execute(SET_LIMIT, {**checks.limit_args(limit), "now": now})
            _refresh_counters(conn, limit.scope)

    def delete_limit(self, scope: str) -> None:
        check_scope(scope)
        with self._write() as (conn, _now):
            checks.require_deleted(conn.execute(DELETE_LIMIT, {"scope": scope}).fetchone() is not None, scope)
            _refresh_counters(conn, scope)

    def list_limits(self, tenant: str | None = None) -> list[Limit]:
        with self._read() as (conn, _now):
            return [limit_row(row) for row in conn.execute(LIST_LIMITS, {"tenant": tenant}).fetchall()]

    def scope_usage(self, scopes: Sequence[str] | None = None) -> list[ScopeUsage]:
        with self._read() as (conn, _now):
            rows = conn.execute(SCOPE_USAGE, {"scopes": None if scopes is None else json.dumps(list(scopes))})
            return [scope_usage_row(row, READ) for row in rows.fetchall()]

    def explain_facts(self, job_id: uuid.UUID, tenant: str | None = None, *, workers_seen_within: float) -> JobFacts:
        status = self.get(job_id, tenant)
        usage = self.scope_usage(job_scopes(status.tenant, status.kind, status.queue, status.concurrency_key))
        workers = self.list_workers(workers_seen_within)
        with self._read() as (conn, now):
            facts = conn.execute(
                EXPLAIN_FACTS,
                {
                    "job_id": str(job_id),
                    "queue": status.queue,
                    "tenant": status.tenant,
                    "priority": status.priority,
                    "run_after": to_text(status.run_after),
                    "now": now,
                },
            ).fetchone()

            def running_ids(scope: str) -> list[Any]:
                rows = conn.execute(RUNNING_IN_SCOPE, {"tenant": tenant, "scope": scope, "limit": SHOWN_RUNNING_IDS})
                return [row["id"] for row in rows.fetchall()]

            return job_facts(status, facts, from_text(now), READ, usage, running_ids, workers)


def _refresh_counters(conn: sqlite3.Connection, scope: str) -> None:
    """The counters a limit change touched, made to agree with limits and the running jobs
    (PostgreSQL's REFRESH_COUNTERS; here the write lock alone keeps the count exact)."""
    for row in conn.execute(CHANGED_SCOPES, {"scope": scope}).fetchall():
        if row["concurrency"] is None and row["rate"] is None:
            conn.execute(DROP_COUNTER, {"scope": row["scope"]})
        else:
            conn.execute(PUT_COUNTER, dict(row))
