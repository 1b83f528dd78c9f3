"""What only the operator console reads and writes on SQLite: jobs by the start of their id, a job's
replays, the operators' sessions."""

from __future__ import annotations

import uuid
from datetime import date

from service.jobs import ApiToken, AuditEntry, OutcomeBucket, Replay
from service.store import checks
from service.store.rows import api_token, audit_entry, replay
from service.store.sqlfiles import statements
from service.store.sqlite.connection import READ, Connected

_SQL = statements("sqlite")

JOB_IDS_IN_RANGE = _SQL["job_ids_in_range"]
JOB_REPLAYS = _SQL["job_replays"]
INSERT_CONSOLE_SESSION = _SQL["insert_console_session"]
CONSOLE_SESSION = _SQL["console_session"]
TOUCH_CONSOLE_SESSION = _SQL["touch_console_session"]
END_CONSOLE_SESSION = _SQL["end_console_session"]
PRUNE_CONSOLE_SESSIONS = _SQL["prune_console_sessions"]
RECORD_ACTION = _SQL["record_action"]
LIST_ACTIONS = _SQL["list_actions"]
RECENT_OUTCOMES = _SQL["recent_outcomes"]
DAILY_OUTCOMES = _SQL["daily_outcomes"]


class Console(Connected):
    """The console's own reads."""

    def job_ids_in_range(self, low: uuid.UUID, high: uuid.UUID, limit: int = 2) -> list[uuid.UUID]:
        # Ids are stored as their canonical text: hyphens at fixed places keep text order id order.
        with self._read() as (conn, _now):
            rows = conn.execute(JOB_IDS_IN_RANGE, {"low": str(low), "high": str(high), "limit": limit}).fetchall()
        return [READ.ident(row["id"]) for row in rows]

    def job_replays(self, job_id: uuid.UUID) -> list[Replay]:
        with self._read() as (conn, _now):
            rows = conn.execute(JOB_REPLAYS, {"job_id": str(job_id)}).fetchall()
        return [replay(row, READ) for row in rows]

    def recent_outcomes(self, by: str, window_seconds: float, buckets: int) -> list[OutcomeBucket]:
        params = checks.outcome_window(by, window_seconds, buckets)
        with self._read() as (conn, now):
            rows = conn.execute(RECENT_OUTCOMES, {**params, "now": now}).fetchall()
        return [OutcomeBucket(**dict(row)) for row in rows]

    def daily_outcomes(self, by: str, first_day: date) -> list[OutcomeBucket]:
        params = {"by": checks.outcome_grouping(by), "first_day": first_day.isoformat()}
        with self._read() as (conn, _now):
            rows = conn.execute(DAILY_OUTCOMES, params).fetchall()
        return [OutcomeBucket(**dict(row)) for row in rows]

    def start_console_session(
        self, session_hash: str, token_id: uuid.UUID, lifetime_seconds: float, idle_seconds: float
    ) -> None:
        with self._write() as (conn, now):
            conn.execute(PRUNE_CONSOLE_SESSIONS, {"now": now, "idle": idle_seconds})
            conn.execute(
                INSERT_CONSOLE_SESSION,
                {"id_hash": session_hash, "token_id": str(token_id), "lifetime": lifetime_seconds, "now": now},
            )

    def console_session(self, session_hash: str, idle_seconds: float, touch_after_seconds: float) -> ApiToken | None:
        with self._read() as (conn, now):
            params = {"id_hash": session_hash, "idle": idle_seconds, "touch_after": touch_after_seconds, "now": now}
            row = conn.execute(CONSOLE_SESSION, params).fetchone()
        if row is None:
            return None
        if row["touch"]:
            with self._write() as (conn, now):
                conn.execute(TOUCH_CONSOLE_SESSION, {"id_hash": session_hash, "now": now})
        return api_token(row, READ)

    def end_console_session(self, session_hash: str) -> None:
        with self._write() as (conn, _now):
            conn.execute(END_CONSOLE_SESSION, {"id_hash": session_hash})

    def record_action(self, actor: str, action: str, target: str, detail: str, jobs: int) -> None:
        with self._write() as (conn, now):
            params = {"actor": actor, "action": action, "target": target, "detail": detail, "jobs": jobs, "now": now}
            conn.execute(RECORD_ACTION, params)

    def list_actions(self, limit: int, before_id: int | None = None, target: str | None = None) -> list[AuditEntry]:
        with self._read() as (conn, _now):
            params = {"limit": limit, "before_id": checks.audit_cursor(before_id), "target": target}
            rows = conn.execute(LIST_ACTIONS, params).fetchall()
        return [audit_entry(row, READ) for row in rows]
