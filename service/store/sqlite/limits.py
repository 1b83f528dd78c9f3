"""Limits on SQLite: an operator's change of a limit and the counters it governs (one
write transaction), the counters' usage, and a job's facts for 'why is it not running?'."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from service.explain import SHOWN_PARENTS, SHOWN_RUNNING_IDS, JobFacts
from service.limits import Limit, ScopeUsage, check_scope, job_scopes
from service.store import checks
from service.store.rows import job_facts, limit_row, scope_usage_row
from service.store.sqlfiles import statements
from service.store.sqlite.connection import READ
from service.store.sqlite.queries import EXPLAIN_FACTS, LIST_LIMITS, RUNNING_IN_SCOPE, SCOPE_USAGE
from service.store.sqlite.reads import Reads
from service.store.sqlite.timestamps import from_text, to_text
from service.store.sqlite.workers import Workers
from service.store.sqlite.workflows import UNFINISHED_PARENTS
from service.workflows import relatives

_SQL = statements("sqlite")

SET_LIMIT = _SQL["set_limit"]
DELETE_LIMIT = _SQL["delete_limit"]
CHANGED_SCOPES = _SQL["changed_scopes"]
DROP_COUNTER = _SQL["drop_counter"]
PUT_COUNTER = _SQL["put_counter"]


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

            found = job_facts(status, facts, from_text(now), READ, usage, running_ids, workers)
            if not status.parents_pending:
                return found
            rows = conn.execute(UNFINISHED_PARENTS, {"job_id": str(job_id), "limit": SHOWN_PARENTS + 1}).fetchall()
            return replace(found, unfinished_parents=tuple(relatives([dict(r) for r in rows])))


def _refresh_counters(conn: sqlite3.Connection, scope: str) -> None:
    """The counters a limit change touched, made to agree with limits and the running jobs
    (PostgreSQL's REFRESH_COUNTERS; here the write lock alone keeps the count exact)."""
    for row in conn.execute(CHANGED_SCOPES, {"scope": scope}).fetchall():
        if row["concurrency"] is None and row["rate"] is None:
            conn.execute(DROP_COUNTER, {"scope": row["scope"]})
        else:
            conn.execute(PUT_COUNTER, dict(row))
