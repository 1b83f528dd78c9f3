"""A :class:`Worker` in this process, on both stores: outcomes, progress, stops, outages, shutdown.

Handlers here block on events the test controls, so nothing depends on sleeping
for the right amount of time; every wait is bounded.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from service.errors import PermanentError, StoreUnavailable
from service.jobs import NewJob
from service.maintenance import Reaper
from service.retry import RetryPolicy
from service.store import Store
from service.worker import App, JobContext, StopReason, Worker, WorkerConfig
from tests.conftest import Database, FakeClock
from tests.worker.harness import wait_until


@contextmanager
def running_worker(store: Store, app: App, **options: Any) -> Iterator[Worker]:
    settings: dict[str, Any] = {"poll_seconds": 0.1, "lease_seconds": 3.0, "grace_seconds": 1.0, **options}
    worker = Worker(store, app, WorkerConfig(**settings), retry_policy=RetryPolicy(base_seconds=0.01))
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
    thread.start()
    assert worker.started.wait(10), "the worker did not start"
    try:
        yield worker
    finally:
        worker.shutdown()
        thread.join(20)
        assert not thread.is_alive(), "the worker did not stop"


@pytest.fixture
def live_store(make_store: Callable[..., Store], store_url: str) -> Store:
    """A store on the real clock (workers need time to pass); running_worker retries after 10 ms at most."""
    return make_store(store_url)


def state(db: Database, job_id: object) -> str:
    return str(db.scalar("SELECT state FROM jobs WHERE id = %(id)s", id=job_id))


def test_jobs_run_to_their_outcomes(live_store: Store, db: Database) -> None:
    app = App()
    app.register("double", lambda ctx: {"value": ctx.payload["x"] * 2})

    @app.handler("adouble")
    async def adouble(ctx: JobContext) -> dict[str, int]:
        return {"value": ctx.payload["x"] * 2}

    @app.handler("boom")
    def boom(ctx: JobContext) -> None:
        raise ValueError(f"boom on attempt {ctx.attempt}")

    @app.handler("perm")
    def perm(ctx: JobContext) -> None:
        raise PermanentError("bad payload")

    jobs = live_store.enqueue_many(
        [
            NewJob(kind="double", payload={"x": 2}),
            NewJob(kind="adouble", payload={"x": 5}),
            NewJob(kind="boom", max_attempts=2),
            NewJob(kind="perm", max_attempts=3),
        ]
    )
    with running_worker(live_store, app):
        wait_until(lambda: all(state(db, j.id) in ("succeeded", "failed") for j in jobs), 20, what="all outcomes")
    double, adouble_, boom_, perm_ = (db.job(j.id) for j in jobs)
    assert live_store.get_result(jobs[0].id) == {"value": 4}
    assert live_store.get_result(jobs[1].id) == {"value": 10}
    assert (boom_["state"], boom_["attempts"]) == ("failed", 2)
    assert boom_["error"].startswith("ValueError: boom on attempt 2")
    assert [a["outcome"] for a in db.attempts(jobs[2].id)] == ["failed", "failed"]
    assert (perm_["state"], perm_["attempts"]) == ("failed", 1)  # no retry for a PermanentError
    assert perm_["error"].startswith("PermanentError: bad payload")


def test_the_kinds_max_attempts_caps_retries(live_store: Store, db: Database) -> None:
    app = App()
    app.register("flaky", lambda ctx: 1 / 0, max_attempts=2)
    job = live_store.enqueue(NewJob(kind="flaky", max_attempts=5))
    with running_worker(live_store, app):
        wait_until(lambda: state(db, job.id) == "failed", 20, what="the job to fail")
    assert db.job(job.id)["attempts"] == 2


def test_the_kinds_max_attempts_is_the_default_of_a_job_that_names_none(live_store: Store, db: Database) -> None:
    app = App()
    app.register("flaky", lambda ctx: 1 / 0, max_attempts=4)
    default = live_store.enqueue(NewJob(kind="flaky"))
    own = live_store.enqueue(NewJob(kind="flaky", max_attempts=2))
    with running_worker(live_store, app):
        for job in (default, own):
            wait_until(lambda job=job: state(db, job.id) == "failed", 20, what="the job to fail")
    assert (db.job(default.id)["attempts"], db.job(default.id)["max_attempts"]) == (4, 4)
    assert (db.job(own.id)["attempts"], db.job(own.id)["max_attempts"]) == (2, 2)


def test_progress_reaches_the_database_within_a_second(live_store: Store, db: Database) -> None:
    """Heartbeats are due every 10 s here (lease 30 s): only the prompt flush explains fresh progress."""
    release = threading.Event()

    def slow(ctx: JobContext) -> str:
        ctx.progress(3, 10)
        ctx.checkpoint({"cursor": "c3"})
        release.wait(20)
        ctx.progress(7)
        release.clear()
        release.wait(20)
        return "done"

    app = App()
    app.register("slow", slow)
    job = live_store.enqueue(NewJob(kind="slow"))
    with running_worker(live_store, app, lease_seconds=30.0):
        began = time.monotonic()
        wait_until(lambda: db.job(job.id)["done"] == 3, 5, what="progress 3 of 10")
        first = time.monotonic() - began
        assert db.job(job.id)["total"] == 10 and db.job(job.id)["checkpoint"] == {"cursor": "c3"}
        release.set()
        began = time.monotonic()
        wait_until(lambda: db.job(job.id)["done"] == 7, 5, what="progress 7 of 10")
        second = time.monotonic() - began
        release.set()
        wait_until(lambda: state(db, job.id) == "succeeded", 10, what="the job to succeed")
    assert first < 1.5 and second < 1.5


def test_progress_reported_just_before_returning_is_kept(live_store: Store, db: Database) -> None:
    """These handlers return long before any heartbeat or flush (10 s, 5 s away): only the
    completion can carry their last progress, and a poll must not show a finished job at 0."""
    app = App()
    app.register("counted", lambda ctx: ctx.progress(3))  # no total: done stays what was counted
    app.register("sized", lambda ctx: ctx.progress(2, 5))  # a total: a succeeded job is all done
    counted, sized = live_store.enqueue_many([NewJob(kind="counted"), NewJob(kind="sized")])
    with running_worker(live_store, app, lease_seconds=30.0, flush_seconds=5.0):
        wait_until(lambda: state(db, counted.id) == state(db, sized.id) == "succeeded", 10, what="both to succeed")
    assert (db.job(counted.id)["done"], db.job(counted.id)["total"]) == (3, None)
    assert (db.job(sized.id)["done"], db.job(sized.id)["total"]) == (5, 5)


def test_claims_only_for_free_slots(live_store: Store, db: Database) -> None:
    release = threading.Event()
    app = App()
    app.register("wait", lambda ctx: release.wait(20) and None)
    jobs = live_store.enqueue_many([NewJob(kind="wait") for _ in range(5)])
    with running_worker(live_store, app, concurrency=2) as worker:
        wait_until(lambda: db.count("jobs", "state = 'running'") == 2, 10, what="two running jobs")
        time.sleep(0.5)  # several poll rounds: still only two
        assert db.count("jobs", "state = 'running'") == 2 and db.count("jobs", "state = 'queued'") == 3
        assert worker.busy == 2
        release.set()
        wait_until(lambda: db.count("jobs", "state = 'succeeded'") == len(jobs), 20, what="every job")


def test_lease_lost_stops_the_handler_and_discards_its_result(live_store: Store, db: Database) -> None:
    seen: list[StopReason | None] = []

    def stubborn(ctx: JobContext) -> str:
        ctx.wait(20)
        seen.append(ctx.stop_reason)
        return "a late result"

    app = App()
    app.register("stubborn", stubborn)
    job = live_store.enqueue(NewJob(kind="stubborn"))
    with running_worker(live_store, app, lease_seconds=0.6) as worker:
        wait_until(lambda: state(db, job.id) == "running", 10, what="the job to run")
        # Another worker took the job over (as after a reap and a new claim).
        db.execute("UPDATE jobs SET lease_owner = 'someone-else' WHERE id = %(id)s", id=job.id)
        wait_until(lambda: seen, 5, what="the handler to be told to stop")
        wait_until(lambda: worker.busy == 0, 5, what="the slot to free")
    assert seen == [StopReason.LEASE_LOST]
    row = db.job(job.id)
    assert (row["state"], row["lease_owner"], row["result_id"]) == ("running", "someone-else", None)
    assert db.count("job_results") == 0


def test_cancel_while_running(live_store: Store, db: Database) -> None:
    seen: list[StopReason | None] = []

    def long(ctx: JobContext) -> None:
        ctx.wait(20)
        seen.append(ctx.stop_reason)
        ctx.raise_if_stopped()

    app = App()
    app.register("long", long)
    job = live_store.enqueue(NewJob(kind="long"))
    with running_worker(live_store, app, lease_seconds=0.9):
        wait_until(lambda: state(db, job.id) == "running", 10, what="the job to run")
        live_store.cancel(job.id)
        wait_until(lambda: state(db, job.id) == "cancelled", 5, what="the job to end cancelled")
    assert seen == [StopReason.CANCELLED]
    assert [a["outcome"] for a in db.attempts(job.id)] == ["cancelled"]


def test_a_handler_that_ignores_a_cancel_is_settled_after_the_grace(live_store: Store, db: Database) -> None:
    release = threading.Event()
    app = App()
    app.register("deaf", lambda ctx: release.wait(20) and "ignored")
    job = live_store.enqueue(NewJob(kind="deaf"))
    with running_worker(live_store, app, lease_seconds=0.9, grace_seconds=0.5) as worker:
        wait_until(lambda: state(db, job.id) == "running", 10, what="the job to run")
        live_store.cancel(job.id)
        wait_until(lambda: state(db, job.id) == "cancelled", 5, what="the job to be settled as cancelled")
        assert worker.busy == 1, "the handler still runs: its slot stays taken"
        release.set()
        wait_until(lambda: worker.busy == 0, 5, what="the slot to free")
    assert state(db, job.id) == "cancelled" and db.count("job_results") == 0


def test_timeout_stops_the_handler_and_fails_the_attempt(live_store: Store, db: Database) -> None:
    seen: list[StopReason | None] = []

    def slow(ctx: JobContext) -> None:
        ctx.wait(20)
        seen.append(ctx.stop_reason)

    app = App()
    app.register("slow", slow, timeout=0.3)
    job = live_store.enqueue(NewJob(kind="slow", max_attempts=1))
    with running_worker(live_store, app):
        wait_until(lambda: state(db, job.id) == "failed", 10, what="the job to fail")
    assert seen == [StopReason.TIMEOUT]
    assert db.job(job.id)["error"] == "TimeoutError: slow ran longer than its timeout of 0.3 s"


def test_shutdown_hands_running_jobs_back_after_the_grace(live_store: Store, db: Database) -> None:
    seen: list[StopReason | None] = []

    def long(ctx: JobContext) -> None:
        ctx.wait(20)
        seen.append(ctx.stop_reason)

    app = App()
    app.register("long", long)
    job = live_store.enqueue(NewJob(kind="long"))
    with running_worker(live_store, app, grace_seconds=0.3, lease_seconds=30.0) as worker:
        wait_until(lambda: state(db, job.id) == "running", 10, what="the job to run")
        assert [w.id for w in live_store.list_workers()] == [worker.id]
    row = db.job(job.id)
    assert (row["state"], row["attempts"], row["lease_owner"]) == ("queued", 0, None)
    assert [a["outcome"] for a in db.attempts(job.id)] == ["released"]
    wait_until(lambda: seen, 5, what="the handler to be told")
    assert seen == [StopReason.SHUTDOWN]
    assert live_store.list_workers() == []  # deregistered


class FlakyStore:
    """A real store whose worker-side calls fail with StoreUnavailable while ``down`` is set."""

    FLAKY = {
        "claim",
        "heartbeat",
        "complete",
        "complete_many",
        "complete_and_claim",
        "fail",
        "release",
        "acknowledge_cancel",
        "reap",
        "check_in",
    }

    def __init__(self, store: Store, *, every_call: bool = False) -> None:
        """``every_call``: every method fails while down (the maintenance duties' reads too)."""
        self._store = store
        self.every_call = every_call
        self.down = threading.Event()
        self.refused = 0
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not callable(attribute) or (name not in self.FLAKY and not (self.every_call and name != "close")):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if self.down.is_set():
                self.refused += 1
                raise StoreUnavailable("the database went away (test)")
            return attribute(*args, **kwargs)

        return call


def test_an_outage_never_kills_the_worker(live_store: Store, db: Database) -> None:
    """Claims, heartbeats and the finish fail for a while; the handler keeps going; then all lands."""
    release = threading.Event()
    app = App()
    app.register("work", lambda ctx: release.wait(20) and {"ok": True})
    flaky = FlakyStore(live_store)
    first = live_store.enqueue(NewJob(kind="work"))
    with running_worker(flaky, app, lease_seconds=3.0, concurrency=2) as worker:  # type: ignore[arg-type]
        wait_until(lambda: state(db, first.id) == "running", 10, what="the job to run")
        flaky.down.set()
        second = live_store.enqueue(NewJob(kind="work"))
        release.set()  # the handler finishes during the outage: its result waits
        wait_until(lambda: flaky.refused >= 5, 10, what="the worker to hit the outage")
        assert state(db, first.id) == "running" and state(db, second.id) == "queued"
        flaky.down.clear()
        wait_until(lambda: state(db, first.id) == state(db, second.id) == "succeeded", 15, what="both jobs")
        assert worker.health.outages >= 1 and worker.health.available
    assert live_store.get_result(first.id) == {"ok": True}


def test_reaper_run_once_requeues_expired_leases_in_batches(
    make_store: Callable[..., Store], store_url: str, clock: FakeClock
) -> None:
    store = make_store(store_url, clock=clock)
    store.enqueue_many([NewJob(kind="k") for _ in range(5)])
    assert len(store.claim("gone-worker", ["default"], 5, 10)) == 5
    reaper = Reaper(store, batch=2)
    assert reaper.run_once().total == 0  # nothing expired yet
    clock.advance(11)
    result = reaper.run_once()
    assert (result.requeued, result.failed) == (5, 0)
    assert reaper.run_once().total == 0  # idempotent


def test_an_outage_is_one_outage_until_a_database_call_succeeds(live_store: Store) -> None:
    """Maintenance ticks with nothing due, every 0.2 s, used to end the outage at once (a
    ``store.available`` with ``down_s: 0.2`` while the database was still away)."""
    flaky = FlakyStore(live_store, every_call=True)
    options = {"reap_seconds": 0.1, "touch_seconds": 60, "poll_seconds": 5, "leader_lease_seconds": 1.5}
    with running_worker(flaky, App(), **options) as worker:  # type: ignore[arg-type]
        # No job runs, so the leader's reaper rests (its check-in says so): leading is enough.
        wait_until(worker.leadership.is_leader, 10, what="the worker to lead")
        flaky.down.set()
        wait_until(lambda: not worker.health.available, 10, what="the worker to see the outage")
        seen = flaky.calls["check_in"]
        time.sleep(1.5)  # several maintenance ticks, and renewals of the leadership that fail
        assert not worker.health.available and worker.health.outages == 1
        # The maintenance loop kept trying through the outage: the lease every 0.1 s (1/15 of it).
        assert flaky.calls["check_in"] >= seen + 3
        flaky.down.clear()
        wait_until(lambda: worker.health.available, 10, what="the outage to end")
        assert worker.health.outages == 1


def test_an_idle_worker_backs_off_to_cheap_probes_and_polls_fast_again_once_it_finds_work(live_store: Store) -> None:
    """No wake-ups (listen off: polling alone). Polling every 0.05 s would be ~60 looks in 3 s,
    each a claim; backed off to a 2 s ceiling (a wait uniform in 0..2 s) it is about ten, and
    after the first empty claim each one is a probe. Then a job arrives every 0.1 s: a worker
    still backed off would find each after ~1 s; one polling fast again, within ~0.1 s."""
    app = App()
    app.register("noop", lambda ctx: None)
    counting = FlakyStore(live_store, every_call=True)
    options = {"poll_seconds": 0.05, "max_poll_seconds": 2.0, "listen": False, "concurrency": 1}
    with running_worker(counting, app, **options):  # type: ignore[arg-type]
        time.sleep(3.0)
        looks = counting.calls["has_claimable"] + counting.calls["claim"]
        assert counting.calls["claim"] <= 2, counting.calls  # the first look; then probes
        assert 3 <= looks <= 25, counting.calls
        pickups = []
        for _ in range(10):
            job = live_store.enqueue(NewJob(kind="noop"))
            enqueued = time.monotonic()
            wait_until(lambda job=job: live_store.get(job.id).state.value != "queued", 10, 0.005, what="pickup")
            pickups.append(time.monotonic() - enqueued)
            time.sleep(0.1)
    assert sorted(pickups)[5] < 0.5, pickups  # the median: fast polling again
