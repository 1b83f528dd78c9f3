"""Workers on PostgreSQL: registered, seen, gone, listed; and their wake-ups (LISTEN)."""

from __future__ import annotations

from collections.abc import Sequence

from service.jobs import WorkerInfo
from service.store import checks
from service.store.base import CheckIn, Listener
from service.store.listener import SilentListener
from service.store.postgres.connection import READ, Connected
from service.store.postgres.listener import PostgresListener
from service.store.postgres.queries import LIST_WORKERS
from service.store.rows import worker_info
from service.store.sqlfiles import statements

_SQL = statements("postgres")

REGISTER_WORKER = _SQL["register_worker"]
TOUCH_WORKER = _SQL["touch_worker"]
DEREGISTER_WORKER = _SQL["deregister_worker"]
CHECK_IN = _SQL["check_in"]


class Workers(Connected):
    """The registry of live workers, and the listener that wakes them."""

    def listen(self, channels: Sequence[str]) -> Listener:
        if not self.notify:
            # JOBQ_NOTIFY=false: nothing sends wake-ups, and behind a transaction pooler a LISTEN
            # would stay on a shared server connection. Waiting callers poll, as on SQLite.
            return SilentListener()
        return PostgresListener(self.database_url, channels)

    def register_worker(self, worker: WorkerInfo) -> None:
        self._fetchall(REGISTER_WORKER, self._params(**checks.worker_args(worker)))

    def touch_worker(self, worker_id: str) -> None:
        self._fetchall(TOUCH_WORKER, self._params(id=worker_id))

    def check_in(self, worker_id: str, name: str, lease_seconds: float, alive_seconds: float) -> CheckIn:
        row = self._fetchone(
            CHECK_IN, self._params(**checks.check_in_args(worker_id, name, lease_seconds, alive_seconds))
        )
        assert row is not None  # one row always: the clock's, the leadership's columns NULL when none was read
        return checks.check_in_answer(row, row["peers"], row["next_schedule_in"], row["jobs_running"], READ.time)

    def deregister_worker(self, worker_id: str) -> None:
        self._fetchall(DEREGISTER_WORKER, self._params(id=worker_id))

    def list_workers(self, seen_within_seconds: float | None = None) -> list[WorkerInfo]:
        rows = self._fetchall(LIST_WORKERS, self._params(within=seen_within_seconds), replay=True)
        return [worker_info(row, READ) for row in rows]
