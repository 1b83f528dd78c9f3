"""Periodic schedules on PostgreSQL (service.schedules): the statements and the store's methods,
mixed into :class:`~service.store.postgres.store.PostgresStore`.

Firing is the fleet leader's: it reads the due schedules and moves each one's
``next_run_at`` on with a compare-and-set (ADVANCE_SCHEDULE, fenced with its token),
after enqueueing the tick's job under the tick's idempotency key. A deposed leader
firing the same tick inserts no second job (the key's unique index) and cannot advance the row.
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
from service.store.sqlfiles import statements

_SQL = statements("postgres")


CLOCK = _SQL["clock"]
SAVE_SCHEDULE = _SQL["save_schedule"]
LIST_SCHEDULES = _SQL["list_schedules"]
DUE_SCHEDULES = _SQL["due_schedules"]
ADVANCE_SCHEDULE = _SQL["advance_schedule"]
SET_PAUSED = _SQL["set_paused"]
DELETE_SCHEDULE = _SQL["delete_schedule"]

_READ = Readers(time=lambda value: value, ident=lambda value: value, names=tuple, json=lambda value: value)


class Schedules(Fenced):
    """The schedule operations of the Store protocol, on PostgreSQL."""

    def database_now(self) -> datetime:
        now: datetime = self._fetchall(CLOCK, self._params(), replay=True)[0]["now"]
        return now

    def save_schedule(self, spec: ScheduleSpec, next_run_at: datetime) -> Schedule:
        [row] = self._fetchall(
            SAVE_SCHEDULE, self._params(**schedule_params(spec, self.max_payload_bytes), next_run_at=next_run_at)
        )
        return schedule_row(row, _READ)

    def list_schedules(self) -> list[Schedule]:
        return [schedule_row(row, _READ) for row in self._fetchall(LIST_SCHEDULES, {}, replay=True)]

    def due_schedules(self, limit: int = DUE_SCHEDULES_BATCH) -> tuple[datetime, list[Schedule], datetime | None]:
        rows = self._fetchall(DUE_SCHEDULES, self._params(limit=limit))
        due = [schedule_row(row, _READ) for row in rows if row["name"] is not None]
        return rows[0]["now"], due, rows[0]["following"]

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
