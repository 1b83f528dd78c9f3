"""What only the operator console reads and writes on PostgreSQL: jobs by the start of their id, a job's
replays, the operators' sessions."""

from __future__ import annotations

import uuid
from datetime import date

from service.jobs import ApiToken, AuditEntry, OutcomeBucket, Replay
from service.store import checks
from service.store.postgres.connection import READ, Connected
from service.store.rows import api_token, audit_entry, replay
from service.store.sqlfiles import statements

_SQL = statements("postgres")

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
        rows = self._fetchall(JOB_IDS_IN_RANGE, self._params(low=low, high=high, limit=limit))
        return [READ.ident(row["id"]) for row in rows]

    def job_replays(self, job_id: uuid.UUID) -> list[Replay]:
        return [replay(row, READ) for row in self._fetchall(JOB_REPLAYS, self._params(job_id=job_id))]

    def recent_outcomes(self, by: str, window_seconds: float, buckets: int) -> list[OutcomeBucket]:
        params = checks.outcome_window(by, window_seconds, buckets)
        return [OutcomeBucket(**row) for row in self._fetchall(RECENT_OUTCOMES, self._params(**params), replay=True)]

    def daily_outcomes(self, by: str, first_day: date) -> list[OutcomeBucket]:
        params = self._params(by=checks.outcome_grouping(by), first_day=first_day)
        return [OutcomeBucket(**row) for row in self._fetchall(DAILY_OUTCOMES, params, replay=True)]

    def start_console_session(
        self, session_hash: str, token_id: uuid.UUID, lifetime_seconds: float, idle_seconds: float
    ) -> None:
        self._fetchall(PRUNE_CONSOLE_SESSIONS, self._params(idle=idle_seconds))
        params = self._params(id_hash=session_hash, token_id=token_id, lifetime=lifetime_seconds)
        self._fetchall(INSERT_CONSOLE_SESSION, params)

    def console_session(self, session_hash: str, idle_seconds: float, touch_after_seconds: float) -> ApiToken | None:
        params = self._params(id_hash=session_hash, idle=idle_seconds, touch_after=touch_after_seconds)
        row = self._fetchone(CONSOLE_SESSION, params)
        if row is None:
            return None
        if row["touch"]:
            self._fetchall(TOUCH_CONSOLE_SESSION, self._params(id_hash=session_hash))
        return api_token(row, READ)

    def end_console_session(self, session_hash: str) -> None:
        self._fetchall(END_CONSOLE_SESSION, self._params(id_hash=session_hash))

    def record_action(self, actor: str, action: str, target: str, detail: str, jobs: int) -> None:
        params = self._params(actor=actor, action=action, target=target, detail=detail, jobs=jobs)
        self._fetchall(RECORD_ACTION, params)

    def list_actions(self, limit: int, before_id: int | None = None, target: str | None = None) -> list[AuditEntry]:
        params = self._params(limit=limit, before_id=checks.audit_cursor(before_id), target=target)
        return [audit_entry(row, READ) for row in self._fetchall(LIST_ACTIONS, params)]
