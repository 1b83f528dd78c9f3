"""Periodic schedules on SQLite (service.schedules): the statements and the store's methods,
mixed into :class:`~service.store.sqlite.store.SqliteStore`. The same operations as on
PostgreSQL (service/store/postgres/schedules.py says how firing stays one job per tick);
here every write holds the file's write lock, so the compare-and-set cannot interleave.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime

from service.errors import ScheduleNotFound
from service.schedules import Schedule, ScheduleSpec
from service.store.base import LeaderLease
from service.store.rows import Readers
from service.store.schedule_rows import DUE_SCHEDULES_BATCH, schedule_params, schedule_row
from service.store.sqlfiles import statements
from service.store.sqlite.connection import Connected
from service.store.sqlite.leadership import check_leader
from service.store.sqlite.timestamps import from_text, to_text

_SQL = statements("sqlite")

SAVE_SCHEDULE = _SQL["save_schedule"]
LIST_SCHEDULES = _SQL["list_schedules"]
DUE_SCHEDULES = _SQL["due_schedules"]
FOLLOWING_SCHEDULE = _SQL["following_schedule"]
ADVANCE_SCHEDULE = _SQL["advance_schedule"]
SET_PAUSED = _SQL["set_paused"]
DELETE_SCHEDULE = _SQL["delete_schedule"]

_READ = Readers(time=from_text, ident=uuid.UUID, names=lambda text: tuple(json.loads(text)), json=json.loads)


class Schedules(Connected):
    """The schedule operations of the Store protocol, on SQLite."""

    def database_now(self) -> datetime:
        with self._read() as (_conn, now):
            return from_text(now)

    def save_schedule(self, spec: ScheduleSpec, next_run_at: datetime) -> Schedule:
        params = {**schedule_params(spec, self.max_payload_bytes), "next_run_at": to_text(next_run_at)}
        with self._write() as (conn, now):
            row = conn.execute(SAVE_SCHEDULE, {**params, "now": now}).fetchone()
        return schedule_row(row, _READ)

    def list_schedules(self) -> list[Schedule]:
        with self._read() as (conn, _now):
            rows = conn.execute(LIST_SCHEDULES).fetchall()
        return [schedule_row(row, _READ) for row in rows]

    def due_schedules(self, limit: int = DUE_SCHEDULES_BATCH) -> tuple[datetime, list[Schedule], datetime | None]:
        with self._read() as (conn, now):
            rows = conn.execute(DUE_SCHEDULES, {"now": now, "limit": limit}).fetchall()
            following = conn.execute(FOLLOWING_SCHEDULE, {"now": now}).fetchone()["following"]
        return (
            from_text(now),
            [schedule_row(row, _READ) for row in rows],
            None if following is None else from_text(following),
        )

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
        params = {
            "name": name,
            "expected": to_text(expected),
            "next_run_at": to_text(next_run_at),
            "tick": to_text(tick) if tick is not None else None,
            "job_id": str(job_id) if job_id is not None else None,
        }
        with self._write() as (conn, now):
            check_leader(conn, now, leader)
            return conn.execute(ADVANCE_SCHEDULE, {**params, "now": now}).fetchone() is not None

    def set_schedule_paused(self, name: str, paused: bool, next_run_at: datetime | None = None) -> Schedule:
        params = {"name": name, "paused": paused, "next_run_at": to_text(next_run_at) if next_run_at else None}
        with self._write() as (conn, now):
            row = conn.execute(SET_PAUSED, {**params, "now": now}).fetchone()
        if row is None:
            raise ScheduleNotFound(name)
        return schedule_row(row, _READ)

    def delete_schedule(self, name: str) -> None:
        with self._write() as (conn, _now):
            row = conn.execute(DELETE_SCHEDULE, {"name": name}).fetchone()
        if row is None:
            raise ScheduleNotFound(name)
