"""The finisher writes results that finish together in one statement, and never makes a lone one wait.

The finisher's pace (how long its writes take, how long each kind's jobs run) is
given to it here, so each test says in seconds which results are worth waiting
for; the waits it then makes are real, on the real store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from service.jobs import ClaimedJob, NewJob
from service.retry import RetryPolicy
from service.store import Store
from service.worker import App, JobContext
from service.worker.finisher import Finisher, Pace
from service.worker.health import StoreHealth
from service.worker.running import RunningJob
from service.worker.settler import Settler
from tests.conftest import Database
from tests.worker.harness import wait_until
from tests.worker.test_worker_in_process import FlakyStore, running_worker

WORKER = "finisher-test"

app = App()
app.register("noop", lambda ctx: {})
app.register("slow", lambda ctx: {})


@pytest.fixture
def live_store(make_store: Callable[..., Store], store_url: str) -> Store:
    return make_store(store_url)


class Slots:
    """The jobs a worker holds, as the finisher sees them; a job's slot frees once it is written."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.jobs: list[RunningJob] = []

    def claim(self, store: Store, kind: str, count: int, *, ran_for: float = 0.0) -> list[RunningJob]:
        """``count`` jobs of ``kind`` claimed and handed to their threads ``ran_for`` seconds ago."""
        store.enqueue_many([NewJob(kind=kind) for _ in range(count)])
        now = time.monotonic()
        claimed = [
            RunningJob(
                job=job,
                spec=app.spec(job.kind),
                ctx=JobContext(job, WORKER),
                lease_seconds=30.0,
                started=now - ran_for,
                handed=now - ran_for,
                last_renewed=now,
            )
            for job in store.claim(WORKER, ["default"], count, 30.0, [kind])
        ]
        assert len(claimed) == count
        with self._lock:
            self.jobs += claimed
        return claimed

    def held(self) -> list[RunningJob]:
        with self._lock:
            return list(self.jobs)

    def claim_request(self, count: int) -> None:
        """No refill: these tests count the finisher's writes of results alone."""
        return None

    def fill(self, jobs: list[ClaimedJob], sent: float) -> None:
        raise AssertionError("nothing was claimed")

    def release(self, running: RunningJob, *, refilled: bool = False) -> None:
        with self._lock:
            self.jobs.remove(running)


@contextmanager
def finisher(store: Store, slots: Slots, pace: Pace) -> Iterator[Finisher]:
    settler = Settler(store, WORKER, StoreHealth(WORKER), RetryPolicy())
    writer = Finisher(store, settler, slots, pace=pace)
    halt = threading.Event()
    thread = threading.Thread(target=writer.run, args=(halt,), daemon=True)
    thread.start()
    try:
        yield writer
    finally:
        halt.set()
        thread.join(10)


def succeed(writer: Finisher, running: RunningJob) -> None:
    """What a job's thread does when its handler returns."""
    assert running.begin_finish()
    writer.put(running, {}, 0.0)


def succeeded(db: Database) -> int:
    return db.count("jobs", "state = 'succeeded'")


def test_results_due_within_the_window_go_in_one_write(live_store: Store, db: Database) -> None:
    slots = Slots()
    first, *others = slots.claim(live_store, "noop", 4)
    # A write takes 2 s and a no-op job 0.3 s: the first result may wait up to 1 s for the
    # three others, due in 0.3 s; they come 0.1 s after it.
    with finisher(live_store, slots, Pace(round_trip=2.0, run_times={"noop": 0.3})) as writer:
        succeed(writer, first)
        time.sleep(0.1)
        for running in others:
            succeed(writer, running)
        wait_until(lambda: succeeded(db) == 4, 10, what="the four results")
    assert writer.batches == 1


def test_a_lone_result_on_a_quiet_worker_is_written_at_once(live_store: Store, db: Database) -> None:
    slots = Slots()
    [alone] = slots.claim(live_store, "noop", 1)
    with finisher(live_store, slots, Pace(round_trip=60.0, run_times={"noop": 0.3})) as writer:
        succeed(writer, alone)
        wait_until(lambda: succeeded(db) == 1, 5, what="the result, long before the 30 s window")


def test_a_result_does_not_wait_for_jobs_of_a_kind_that_runs_for_minutes(live_store: Store, db: Database) -> None:
    slots = Slots()
    [short] = slots.claim(live_store, "noop", 1)
    slots.claim(live_store, "slow", 3)
    with finisher(live_store, slots, Pace(round_trip=60.0, run_times={"noop": 0.3, "slow": 600.0})) as writer:
        succeed(writer, short)
        wait_until(lambda: succeeded(db) == 1, 5, what="the short job's result, without waiting for the slow ones")


def test_a_result_does_not_wait_for_jobs_already_running_far_longer_than_their_kind(
    live_store: Store, db: Database
) -> None:
    slots = Slots()
    [short] = slots.claim(live_store, "noop", 1)
    slots.claim(live_store, "noop", 3, ran_for=100.0)  # stuck, or slow this time: they may run for minutes
    with finisher(live_store, slots, Pace(round_trip=60.0, run_times={"noop": 0.3})) as writer:
        succeed(writer, short)
        wait_until(lambda: succeeded(db) == 1, 5, what="the result, without waiting for the overdue jobs")


def test_the_window_shrinks_with_the_results_already_waiting() -> None:
    pace = Pace(round_trip=0.004)
    # One result waiting may wait half a round trip for one more; three, a quarter.
    assert pace.window(1) == pytest.approx(0.002)
    assert pace.window(3) == pytest.approx(0.001)
    assert Pace().window(1) == 0.0  # nothing measured yet: no result waits


def test_no_op_jobs_finishing_together_at_concurrency_4_are_written_in_fewer_writes(
    live_store: Store, db: Database
) -> None:
    """Without the pace the writes alternated for good between 1 and 3 results: the jobs a
    write refilled finished during the next write, never in it (2 results a write)."""
    jobs = 400
    live_store.enqueue_many([NewJob(kind="noop") for _ in range(jobs)])
    with running_worker(live_store, app, concurrency=4) as worker:
        wait_until(lambda: succeeded(db) == jobs, 60, what="every job")
        writes = worker.finisher.batches
    assert writes < jobs / 3, f"{writes} writes for {jobs} results"


@pytest.mark.postgres_only(reason="the enqueue wakes the worker by notification; SQLite's worker polls")
def test_a_slot_the_finishers_claim_looked_for_is_not_claimed_for_again(live_store: Store, db: Database) -> None:
    """The finisher's claim for a freed slot goes with the result; the claim loop does not look
    again at once (it looked a moment ago): on a quiet worker a job costs one claim and one
    finish, not a third statement that finds nothing."""
    release = threading.Event()
    holding = App()
    holding.register("hold", lambda ctx: release.wait(20) and {})
    counting = FlakyStore(live_store)
    with running_worker(counting, holding, concurrency=1, poll_seconds=30.0) as worker:  # type: ignore[arg-type]
        live_store.enqueue(NewJob(kind="hold"))  # its notification wakes the claim loop
        wait_until(lambda: worker.busy == 1, 10, what="the job to start")
        claims = counting.calls["claim"]
        release.set()
        wait_until(lambda: succeeded(db) == 1, 10, what="the job")
        time.sleep(0.5)  # a claim loop woken by the freed slot claims within milliseconds
        assert counting.calls["claim"] == claims
        assert counting.calls["complete_and_claim"] == 1 and worker.finisher.written == 1
