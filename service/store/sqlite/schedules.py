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
from service.store.sqlite.connection import Connected
from service.store.sqlite.leadership import check_leader
from service.store.sqlite.timestamps import from_text, to_text

# Insert or redefine; a redefinition keeps paused, the last run, and next_run_at unless
# the cron expression or the time zone changed (a worker restart must not re-fire a tick).
SAVE_SCHEDULE = """
INSERT INTO schedules (name, cron, timezone, kind, payload, queue, tenant, catch_up, source,
                       next_run_at, created_at, updated_at)
VALUES (:name, :cron, :timezone, :kind, :payload, :queue, :tenant, :catch_up, :source, :next_run_at, :now, :now)
ON CONFLICT (name) DO UPDATE SET
    next_run_at = CASE WHEN schedules.cron <> excluded.cron OR schedules.timezone <> excluded.timezone
                       THEN excluded.next_run_at ELSE schedules.next_run_at END,
    cron = excluded.cron, timezone = excluded.timezone, kind = excluded.kind,
    payload = excluded.payload, queue = excluded.queue, tenant = excluded.tenant,
    catch_up = excluded.catch_up, source = excluded.source, updated_at = excluded.updated_at
RETURNING *"""

LIST_SCHEDULES = "SELECT * FROM schedules ORDER BY name"

# The scheduler's read, every half second on every worker: ix_schedules_due, due rows only.
DUE_SCHEDULES = """
SELECT * FROM schedules
WHERE NOT paused AND next_run_at <= :now
ORDER BY next_run_at
LIMIT :limit"""

# Compare-and-set: only the pass that read this next_run_at moves it on (one writer per tick).
ADVANCE_SCHEDULE = """
UPDATE schedules
SET next_run_at = :next_run_at,
    last_run_at = coalesce(:tick, last_run_at),
    last_job_id = coalesce(:job_id, last_job_id),
    updated_at = :now
WHERE name = :name AND next_run_at = :expected AND NOT paused
RETURNING name"""

SET_PAUSED = """
UPDATE schedules
SET paused = :paused, next_run_at = coalesce(:next_run_at, next_run_at), updated_at = :now
WHERE name = :name
RETURNING *"""

DELETE_SCHEDULE = "DELETE FROM schedules WHERE name = :name RETURNING name"

_READ = Readers(time=from_text, ident=uuid.UUID, names=lambda text: tuple(json.loads(text)), json=json.loads)


class Schedules(Connected):
    """The schedule operations of the Store protocol, on SQLite."""

    def database_now(self) -> datetime:
        with self._read() as (_conn, now):
            return from_text(now)

    def save_schedule(self, spec: ScheduleSpec, next_run_at: datetime) -> Schedule:
        params = {**schedule_params(spec), "next_run_at": to_text(next_run_at)}
        with self._write() as (conn, now):
            row = conn.execute(SAVE_SCHEDULE, {**params, "now": now}).fetchone()
        return schedule_row(row, _READ)

    def list_schedules(self) -> list[Schedule]:
        with self._read() as (conn, _now):
            rows = conn.execute(LIST_SCHEDULES).fetchall()
        return [schedule_row(row, _READ) for row in rows]

    def due_schedules(self, limit: int = DUE_SCHEDULES_BATCH) -> tuple[datetime, list[Schedule]]:
        with self._read() as (conn, now):
            rows = conn.execute(DUE_SCHEDULES, {"now": now, "limit": limit}).fetchall()
        return from_text(now), [schedule_row(row, _READ) for row in rows]

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
