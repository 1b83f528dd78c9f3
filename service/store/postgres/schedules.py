"""Periodic schedules on PostgreSQL (service.schedules): the statements and the store's methods,
mixed into :class:`~service.store.postgres.store.PostgresStore`.

Firing is leaderless: every worker reads the due schedules and moves each one's
``next_run_at`` on with a compare-and-set (ADVANCE_SCHEDULE), after enqueueing the
tick's job under the tick's idempotency key. Two workers that fire the same tick
insert one job (the key's unique index) and one of them advances the row.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from service.errors import ScheduleNotFound
from service.schedules import Schedule, ScheduleSpec
from service.store.base import LeaderLease
from service.store.postgres.leadership import Fenced
from service.store.rows import Readers
from service.store.schedule_rows import DUE_SCHEDULES_BATCH, schedule_params, schedule_row

_NOW = "coalesce(%(now)s::timestamptz, now())"

CLOCK = f"SELECT {_NOW} AS now"

# Insert or redefine; a redefinition keeps paused, the last run, and next_run_at unless
# the cron expression or the time zone changed (a worker restart must not re-fire a tick).
SAVE_SCHEDULE = f"""
INSERT INTO schedules (name, cron, timezone, kind, payload, queue, tenant, catch_up, source,
                       next_run_at, created_at, updated_at)
VALUES (%(name)s, %(cron)s, %(timezone)s, %(kind)s, %(payload)s::jsonb, %(queue)s, %(tenant)s,
        %(catch_up)s, %(source)s, %(next_run_at)s, {_NOW}, {_NOW})
ON CONFLICT (name) DO UPDATE SET
    next_run_at = CASE WHEN schedules.cron <> excluded.cron OR schedules.timezone <> excluded.timezone
                       THEN excluded.next_run_at ELSE schedules.next_run_at END,
    cron = excluded.cron, timezone = excluded.timezone, kind = excluded.kind,
    payload = excluded.payload, queue = excluded.queue, tenant = excluded.tenant,
    catch_up = excluded.catch_up, source = excluded.source, updated_at = excluded.updated_at
RETURNING *"""

LIST_SCHEDULES = "SELECT * FROM schedules ORDER BY name"

# The scheduler's read, every half second on every worker: ix_schedules_due, due rows only.
DUE_SCHEDULES = f"""
SELECT n.now, s.*
FROM (SELECT {_NOW} AS now) AS n
LEFT JOIN LATERAL (
    SELECT * FROM schedules
    WHERE NOT paused AND next_run_at <= n.now
    ORDER BY next_run_at
    LIMIT %(limit)s
) AS s ON true"""

# Compare-and-set: only the pass that read this next_run_at moves it on (one writer per tick).
ADVANCE_SCHEDULE = f"""
UPDATE schedules
SET next_run_at = %(next_run_at)s,
    last_run_at = coalesce(%(tick)s, last_run_at),
    last_job_id = coalesce(%(job_id)s, last_job_id),
    updated_at = {_NOW}
WHERE name = %(name)s AND next_run_at = %(expected)s AND NOT paused
RETURNING name"""

SET_PAUSED = f"""
UPDATE schedules
SET paused = %(paused)s, next_run_at = coalesce(%(next_run_at)s, next_run_at), updated_at = {_NOW}
WHERE name = %(name)s
RETURNING *"""

DELETE_SCHEDULE = "DELETE FROM schedules WHERE name = %(name)s RETURNING name"

_READ = Readers(time=lambda value: value, ident=lambda value: value, names=tuple, json=lambda value: value)


class Schedules(Fenced):
    """The schedule operations of the Store protocol, on PostgreSQL."""

    def database_now(self) -> datetime:
        now: datetime = self._fetchall(CLOCK, self._params())[0]["now"]
        return now

    def save_schedule(self, spec: ScheduleSpec, next_run_at: datetime) -> Schedule:
        [row] = self._fetchall(SAVE_SCHEDULE, self._params(**schedule_params(spec), next_run_at=next_run_at))
        return schedule_row(row, _READ)

    def list_schedules(self) -> list[Schedule]:
        return [schedule_row(row, _READ) for row in self._fetchall(LIST_SCHEDULES, {})]

    def due_schedules(self, limit: int = DUE_SCHEDULES_BATCH) -> tuple[datetime, list[Schedule]]:
        rows = self._fetchall(DUE_SCHEDULES, self._params(limit=limit))
        return rows[0]["now"], [schedule_row(row, _READ) for row in rows if row["name"] is not None]

    def advance_schedule(
        self,
        name: str,
        expected: datetime,
        next_run_at: datetime,
        tick: datetime | None = None,
        job_id: uuid.UUID | None = None,
        *,
        leader: LeaderLease | None = None,
    ) -> bool:
        params = self._params(name=name, expected=expected, next_run_at=next_run_at, tick=tick, job_id=job_id)
        return bool(self._fenced(leader, lambda conn: conn.execute(ADVANCE_SCHEDULE, params).fetchall()))

    def set_schedule_paused(self, name: str, paused: bool, next_run_at: datetime | None = None) -> Schedule:
        rows = self._fetchall(SET_PAUSED, self._params(name=name, paused=paused, next_run_at=next_run_at))
        if not rows:
            raise ScheduleNotFound(name)
        return schedule_row(rows[0], _READ)

    def delete_schedule(self, name: str) -> None:
        if not self._fetchall(DELETE_SCHEDULE, {"name": name}):
            raise ScheduleNotFound(name)
