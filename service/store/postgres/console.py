"""What only the operator console reads on PostgreSQL: jobs by the start of their id, a job's replays."""

from __future__ import annotations

import uuid

from service.jobs import Replay
from service.store.postgres.connection import READ, Connected
from service.store.rows import replay
from service.store.sqlfiles import statements

_SQL = statements("postgres")

JOB_IDS_IN_RANGE = _SQL["job_ids_in_range"]
JOB_REPLAYS = _SQL["job_replays"]


class Console(Connected):
    """The console's own reads."""

    def job_ids_in_range(self, low: uuid.UUID, high: uuid.UUID, limit: int = 2) -> list[uuid.UUID]:
        rows = self._fetchall(JOB_IDS_IN_RANGE, self._params(low=low, high=high, limit=limit))
        return [READ.ident(row["id"]) for row in rows]

    def job_replays(self, job_id: uuid.UUID) -> list[Replay]:
        return [replay(row, READ) for row in self._fetchall(JOB_REPLAYS, self._params(job_id=job_id))]
