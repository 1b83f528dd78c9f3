"""The handler the fleet through PgBouncer runs in real ``jobq worker`` processes
(``--app tests.pooler.apps``; the processes find it through ``PYTHONPATH``, see
tests/worker/harness.py)."""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

from service.worker import App, JobContext

app = App("pooler-tests")

_side_effects: psycopg.Connection[Any] | None = None


def _side_effect_connection() -> psycopg.Connection[Any]:
    """One connection per process (concurrency 1: one job at a time), to the side-effect
    database: another database than the queue's, so it is not counted as jobq's."""
    global _side_effects
    if _side_effects is None or _side_effects.closed:
        _side_effects = psycopg.connect(os.environ["JOBQ_SIDE_EFFECT_URL"], autocommit=True)
    return _side_effects


@app.handler("itemised")
def itemised(ctx: JobContext) -> dict[str, Any]:
    """``items`` items of ``delay`` seconds each, an outcome per item; then the side effect,
    recorded once per job id (the idempotency key) and once per run."""
    delay = float(ctx.payload.get("delay", 0.01))

    def one(index: int) -> int:
        time.sleep(delay)
        return index * index

    squares = ctx.map(list(range(int(ctx.payload["items"]))), one)
    conn = _side_effect_connection()
    try:
        conn.execute(
            "INSERT INTO side_effects (job_id, worker) VALUES (%s, %s) ON CONFLICT (job_id) DO NOTHING",
            [ctx.job_id, ctx.worker_id],
        )
        conn.execute(
            "INSERT INTO side_effect_runs (job_id, worker, attempt) VALUES (%s, %s, %s)",
            [ctx.job_id, ctx.worker_id, ctx.attempt],
        )
    except psycopg.Error:
        conn.close()
        raise
    return {"sum": sum(int(s) for s in squares if isinstance(s, int))}
