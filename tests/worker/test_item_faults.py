"""Item outcomes under faults, with real ``jobq worker`` processes on both stores: a worker
SIGKILLed in the middle of a job (every item ends with exactly one outcome, none is run again
once its outcome was written), and a worker paused past its lease (SIGSTOP) that writes no
item outcome when it resumes."""

from __future__ import annotations

import signal
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from service.jobs import NewJob
from service.store import Store
from tests.conftest import Database
from tests.worker.harness import Fleet, wait_until

pytestmark = pytest.mark.slow


# The replacement worker reaps the first one's job once it leads the fleet's maintenance: with the
# default leadership lease (15 s) it waited ~10-15 s for the dead or paused leader's lease to end.
ARGS = ("--concurrency", "1", "--lease-seconds", "1.5", "--poll-seconds", "0.2", "--leader-lease-seconds", "2")


def start_job(
    store: Store, store_fleet: Fleet, db: Database, log: Path, items: int, delay: float, written: int
) -> uuid.UUID:
    """A job of ``items`` items and a worker running it, once it wrote ``written`` outcomes."""
    job = store.enqueue(
        NewJob(kind="numbered", payload={"count": items, "delay": delay, "call_log": str(log)}, max_attempts=3)
    )
    store_fleet.start(*ARGS)
    wait_until(lambda: db.count("job_items") >= written, 30, what="the first worker to write some outcomes")
    return job.id


def runs_per_item(log: Path) -> dict[int, list[int]]:
    runs: dict[int, list[int]] = defaultdict(list)
    for line in log.read_text().splitlines():
        attempt, index = line.split()
        runs[int(index)].append(int(attempt))
    return runs


def test_a_worker_killed_mid_job_leaves_exactly_one_outcome_per_item(
    store_fleet: Fleet, store_url: str, make_store: Callable[..., Store], db: Database, tmp_path: Path
) -> None:
    items, log = 300, tmp_path / "calls.log"
    store = make_store(store_url)
    job_id = start_job(store, store_fleet, db, log, items, 0.01, written=60)
    store_fleet.workers[0].kill()
    written_by_first = db.count("job_items")
    store_fleet.start(*ARGS)

    wait_until(lambda: db.job(job_id)["state"] == "succeeded", 60, interval=0.2, what="the job to succeed")

    row = db.job(job_id)
    outcomes = {
        r["item_index"]: r["attempt"]
        for r in db.rows("SELECT item_index, attempt FROM job_items WHERE job_id = %(id)s", id=job_id)
    }
    runs = runs_per_item(log)
    rerun = [i for i, attempts in runs.items() if len(attempts) > 1]
    print(
        f"\nkilled after {written_by_first} outcomes were written; {len(rerun)} items ran twice "
        "(run, but their outcome not yet written when the worker died)"
    )
    assert (row["items_ok"], row["items_failed"], row["done"]) == (items, 0, items)
    assert db.count("job_items", "job_id = %(id)s", id=job_id) == items
    assert sorted(outcomes) == list(range(items))
    assert {a["outcome"] for a in db.attempts(job_id)} == {"lease_expired", "succeeded"}
    assert sorted(runs) == list(range(items))
    for index, attempts in runs.items():
        # An item runs again only in an attempt after the one that ran it without writing its outcome:
        # its outcome is the last attempt's that ran it, and nothing ran it once the outcome was there.
        assert outcomes[index] == max(attempts), (index, attempts, outcomes[index])
    assert written_by_first > 0 and len(rerun) < items - written_by_first
    assert len(store.get_result(job_id)) == items


def test_a_paused_worker_past_its_lease_writes_no_item_outcome(
    store_fleet: Fleet, store_url: str, make_store: Callable[..., Store], db: Database, tmp_path: Path
) -> None:
    items, log = 120, tmp_path / "calls.log"
    store = make_store(store_url)
    job_id = start_job(store, store_fleet, db, log, items, 0.03, written=10)
    paused = store_fleet.workers[0]
    time.sleep(0.25)  # half a flush interval after a heartbeat wrote outcomes: some are recorded, not yet written
    paused.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    store_fleet.start(*ARGS)
    wait_until(lambda: db.job(job_id)["state"] == "succeeded", 60, interval=0.2, what="the other worker to finish")
    by_first = db.count("job_items", "attempt = 1")
    run_by_first = {i for i, attempts in runs_per_item(log).items() if 1 in attempts}
    assert len(run_by_first) > by_first, "the paused worker held outcomes it had not written yet"

    paused.signal(signal.SIGCONT)
    wait_until(
        lambda: paused.events("job.lease_lost") or paused.events("job.discarded"),
        20,
        what="the resumed worker to find its lease gone",
    )
    time.sleep(0.5)  # its keeper's next round, had anything been left to write

    print(
        f"\npaused {time.monotonic() - stopped_at:.1f} s; {by_first} outcomes written before the pause, "
        f"{len(run_by_first) - by_first} run but unwritten"
    )
    assert db.count("job_items", "attempt = 1") == by_first, "a fenced-out worker wrote item outcomes"
    assert db.count("job_items") == items
    assert (db.job(job_id)["items_ok"], db.job(job_id)["items_failed"]) == (items, 0)
    assert not paused.events("job.succeeded")
