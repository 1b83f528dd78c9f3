"""Periodic jobs across a fleet of real worker processes: one job per tick, whatever the
number of workers (the pinned-clock cases, outages and DST, are in tests/store/test_schedules.py)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from service.schedules import tick_key
from tests.conftest import Database
from tests.worker.harness import Fleet, WorkerProcess

APP = "tests.worker.periodic_apps"


@pytest.mark.slow
def test_three_workers_enqueue_exactly_one_job_per_tick_of_a_per_second_schedule(
    fleet: Fleet, pg_url: str, pg: Database, tmp_path: Path
):
    workers = [WorkerProcess(pg_url, tmp_path, f"periodic{n}", ["--concurrency", "2"], app=APP) for n in range(3)]
    fleet.workers.extend(workers)
    for worker in workers:
        worker.wait_started()

    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    window = [tick_key("every_second", start + timedelta(seconds=s)) for s in range(10)]
    time.sleep(max(0.0, (start - datetime.now(UTC)).total_seconds()) + 10 + 1.5)  # the last tick, fired

    keys = {row["idempotency_key"] for row in pg.rows("SELECT idempotency_key FROM jobs WHERE kind = 'every_second'")}
    fired_in_window = [key for key in window if key in keys]
    assert 9 <= len(fired_in_window) <= 10, f"ticks fired in 10 s: {len(fired_in_window)}"
    assert pg.count("jobs", "kind = 'every_second'") == len(keys), "one job per tick, never two"
    assert all(w.alive() for w in workers)
    firing_workers = [w.name for w in workers if w.events("scheduler.fired")]
    # The schedules are the fleet's leader's to fire (README: Leadership): one worker, unless the lead moved.
    gained = sum(len(w.events("leadership.gained")) for w in workers)
    assert 1 <= len(firing_workers) <= gained, f"ticks fired by {firing_workers}, {gained} terms of leadership"
    assert pg.count("jobs", "kind = 'every_second' AND state = 'succeeded'") >= 8, "and the jobs run"
