"""What only the operator console reads on SQLite: jobs by the start of their id, a job's replays."""

from __future__ import annotations

import uuid

from service.jobs import Replay
from service.store.rows import replay
from service.store.sqlfiles import statements
from service.store.sqlite.connection import READ, Connected

_SQL = statements("sqlite")

JOB_IDS_IN_RANGE = _SQL["job_ids_in_range"]
JOB_REPLAYS = _SQL["job_replays"]


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
