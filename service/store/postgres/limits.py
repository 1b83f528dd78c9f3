"""Limits on PostgreSQL: an operator's change of a limit and the counters it governs
(one transaction under LOCK_COUNTERS), the counters' usage, and a job's facts for
'why is it not running?'."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from service.explain import SHOWN_PARENTS, SHOWN_RUNNING_IDS, JobFacts
from service.limits import Limit, ScopeUsage, check_scope, job_scopes
from service.store import checks
from service.store.postgres.connection import READ
from service.store.postgres.queries import EXPLAIN_FACTS, LIST_LIMITS, RUNNING_IN_SCOPE, SCOPE_USAGE
from service.store.postgres.reads import Reads
from service.store.postgres.workers import Workers
from service.store.postgres.workflows import UNFINISHED_PARENTS
from service.store.rows import job_facts, limit_row, scope_usage_row
from service.store.sqlfiles import statements
from service.workflows import relatives

_SQL = statements("postgres")

LOCK_COUNTERS = _SQL["lock_counters"]
SET_LIMIT = _SQL["set_limit"]
DELETE_LIMIT = _SQL["delete_limit"]
REFRESH_COUNTERS = _SQL["refresh_counters"]


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
        return [limit_row(row) for row in self._fetchall(LIST_LIMITS, self._params(tenant=tenant), replay=True)]

    def scope_usage(self, scopes: Sequence[str] | None = None) -> list[ScopeUsage]:
        rows = self._fetchall(
            SCOPE_USAGE, self._params(scopes=list(scopes) if scopes is not None else None), replay=True
        )
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
            replay=True,
        )
        assert facts is not None  # one row, always
        usage = self.scope_usage(job_scopes(status.tenant, status.kind, status.queue, status.concurrency_key))

        def running_ids(scope: str) -> list[Any]:
            rows = self._fetchall(
                RUNNING_IN_SCOPE, self._params(tenant=tenant, scope=scope, limit=SHOWN_RUNNING_IDS), replay=True
            )
            return [row["id"] for row in rows]

        found = job_facts(status, facts, facts["now"], READ, usage, running_ids, self.list_workers(workers_seen_within))
        if not status.parents_pending:
            return found
        rows = self._fetchall(UNFINISHED_PARENTS, self._params(job_id=job_id, limit=SHOWN_PARENTS + 1))
        return replace(found, unfinished_parents=tuple(relatives(rows)))
