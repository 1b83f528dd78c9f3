"""Workers on SQLite: registered, seen, gone, listed; no wake-ups (workers poll)."""

from __future__ import annotations

from collections.abc import Sequence

from service.jobs import WorkerInfo
from service.store import checks
from service.store.base import CheckIn, Listener
from service.store.listener import SilentListener
from service.store.rows import worker_info
from service.store.sqlfiles import statements
from service.store.sqlite.connection import READ, Connected
from service.store.sqlite.leadership import ACQUIRE_LEADERSHIP, HELD_LEADERSHIP
from service.store.sqlite.queries import LIST_WORKERS

_SQL = statements("sqlite")

REGISTER_WORKER = _SQL["register_worker"]
TOUCH_WORKER = _SQL["touch_worker"]
DEREGISTER_WORKER = _SQL["deregister_worker"]
WORKER_PEERS = _SQL["worker_peers"]
NEXT_SCHEDULE_IN = _SQL["next_schedule_in"]
JOBS_RUNNING = _SQL["jobs_running"]


class Workers(Connected):
    """The registry of live workers."""

    def listen(self, channels: Sequence[str]) -> Listener:
        return SilentListener()

    def register_worker(self, worker: WorkerInfo) -> None:
        with self._write() as (conn, now):
            conn.execute(REGISTER_WORKER, {**checks.worker_args(worker), "now": now})

    def touch_worker(self, worker_id: str) -> None:
        with self._write() as (conn, now):
            conn.execute(TOUCH_WORKER, {"id": worker_id, "now": now})

    def check_in(self, worker_id: str, name: str, lease_seconds: float, alive_seconds: float) -> CheckIn:
        """The touch, the leadership (as acquire_leadership), the peers, the next schedule and
        whether a job runs, in one write transaction (PostgreSQL's CHECK_IN is one statement)."""
        params = checks.check_in_args(worker_id, name, lease_seconds, alive_seconds)
        with self._write() as (conn, now):
            conn.execute(TOUCH_WORKER, {"id": worker_id, "now": now})
            lead = conn.execute(ACQUIRE_LEADERSHIP, {**params, "now": now}).fetchone()
            if lead is None:
                lead = conn.execute(HELD_LEADERSHIP, {**params, "now": now}).fetchone()
            peers = conn.execute(WORKER_PEERS, {**params, "now": now}).fetchone()["peers"]
            next_schedule_in = conn.execute(NEXT_SCHEDULE_IN, {"now": now}).fetchone()["next_schedule_in"]
            running = conn.execute(JOBS_RUNNING).fetchone()["jobs_running"]
        return checks.check_in_answer(lead, peers, next_schedule_in, running, READ.time)

    def deregister_worker(self, worker_id: str) -> None:
        with self._write() as (conn, _now):
            conn.execute(DEREGISTER_WORKER, {"id": worker_id})

    def list_workers(self, seen_within_seconds: float | None = None) -> list[WorkerInfo]:
        with self._read() as (conn, now):
            rows = conn.execute(LIST_WORKERS, {"now": now, "within": seen_within_seconds}).fetchall()
        return [worker_info(row, READ) for row in rows]
