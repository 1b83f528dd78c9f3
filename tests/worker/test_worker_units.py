"""The worker's pieces without a database: registry, context, executor, backoff, config."""

from __future__ import annotations

import asyncio
import random
import re
import statistics
import threading
import time
import uuid
from datetime import UTC, datetime

import pytest

from service.errors import InvalidInput, PermanentError, StoreUnavailable
from service.jobs import ClaimedJob, Lease
from service.maintenance.duties import Duty, Maintenance
from service.worker import (
    App,
    JobContext,
    JobStopped,
    StopReason,
    WorkerConfig,
    load_app,
    make_worker_id,
)
from service.worker.backoff import Backoff, jittered
from service.worker.claimer import FLEET_CEILING_SECONDS, IdlePolls
from service.worker.executor import Failed, Stopped, Succeeded, execute
from service.worker.tracebacks import MAX_ERROR_CHARS, format_error


def claimed(kind: str = "k", payload: dict | None = None, checkpoint: object = None, attempt: int = 1) -> ClaimedJob:
    return ClaimedJob(
        lease=Lease(job_id=uuid.uuid4(), owner="w", attempt=attempt),
        kind=kind,
        queue="default",
        tenant="default",
        payload=payload or {},
        checkpoint=checkpoint,
        done=0,
        total=None,
        max_attempts=3,
        lease_expires_at=datetime.now(UTC),
    )


def run(app: App, kind: str, ctx: JobContext | None = None):
    return execute(app.spec(kind), ctx or JobContext(claimed(kind), "w"))


# -- registry ------------------------------------------------------------------------------


def test_handler_decorator_registers_kinds_with_defaults() -> None:
    app = App()

    @app.handler()
    def resize(ctx: JobContext) -> None: ...

    @app.handler("transcribe", queue="gpu", max_attempts=5, lease_seconds=120, timeout=3600)
    async def transcribe(ctx: JobContext) -> None: ...

    assert app.kinds == ("resize", "transcribe")
    assert app.queues == ("default", "gpu")
    spec = app.spec("transcribe")
    assert (spec.queue, spec.max_attempts, spec.lease_seconds, spec.timeout) == ("gpu", 5, 120, 3600)
    assert spec.is_async and not app.spec("resize").is_async
    assert resize.__name__ == "resize"  # the decorator returns the function itself


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"max_attempts": 101}, {"lease_seconds": 0}, {"timeout": -1}, {"queue": " "}],
)
def test_handler_options_are_checked(kwargs: dict) -> None:
    with pytest.raises(InvalidInput):
        App().register("k", lambda ctx: None, **kwargs)


def test_a_kind_has_one_handler() -> None:
    app = App()
    app.register("k", lambda ctx: None)
    with pytest.raises(InvalidInput, match="already has a handler"):
        app.register("k", lambda ctx: None)
    with pytest.raises(InvalidInput, match="no handler"):
        app.spec("other")


def test_include_merges_apps() -> None:
    first, second = App(), App()
    first.register("a", lambda ctx: None)
    second.register("b", lambda ctx: None, queue="q")
    first.include(second)
    assert first.kinds == ("a", "b") and first.spec("b").queue == "q"


def test_load_app() -> None:
    assert load_app("service.examples").kinds == ("classify", "enrich", "fail", "sleep")
    assert load_app("service.examples:app") is load_app("service.examples")
    with pytest.raises(InvalidInput, match="no module named"):
        load_app("no_such_module_anywhere")
    with pytest.raises(InvalidInput, match="no attribute"):
        load_app("service.examples:nothing")
    with pytest.raises(InvalidInput, match="not a jobq App"):
        load_app("service.examples:LABELS")


# -- context --------------------------------------------------------------------------------


def test_progress_is_recorded_locally_and_checked() -> None:
    ctx = JobContext(claimed(), "w")
    assert ctx.pending() is None
    ctx.progress(3, 10)
    pending = ctx.pending()
    assert pending is not None and (pending.done, pending.total, pending.has_checkpoint) == (3, 10, False)
    ctx.flushed(pending)
    assert ctx.pending() is None
    with pytest.raises(InvalidInput):
        ctx.progress(11)  # past the known total
    with pytest.raises(InvalidInput):
        ctx.progress(-1)


def test_checkpoint_is_a_copy_and_flushes_once() -> None:
    ctx = JobContext(claimed(), "w")
    state = {"cursor": 1}
    ctx.checkpoint(state)
    state["cursor"] = 2
    assert ctx.last_checkpoint == {"cursor": 1}
    pending = ctx.pending()
    assert pending is not None and pending.checkpoint == {"cursor": 1}
    ctx.flushed(pending)
    ctx.progress(1)
    later = ctx.pending()
    assert later is not None and later.checkpoint is None  # already written
    with pytest.raises(InvalidInput):
        ctx.checkpoint({"not json": object()})


def test_items_resume_after_the_checkpoint_with_the_saved_state() -> None:
    first = JobContext(claimed(), "w")
    seen = first.state.setdefault("seen", [])
    for item in first.items(list(range(10))):
        seen.append(item)
        if item == 3:
            break  # the worker dies while item 4 is being done
    saved = first.last_checkpoint
    assert saved["position"] <= 3 + 1 and saved["state"]["seen"] == list(range(saved["position"]))

    second = JobContext(claimed(checkpoint=saved, attempt=2), "w")
    assert second.state == {"seen": list(range(saved["position"]))}
    again = second.state["seen"]
    for item in second.items(list(range(10))):
        again.append(item)
    assert again == list(range(10))
    assert second.done == 10 and second.total == 10


def test_items_raise_job_stopped_once_told_to_stop() -> None:
    ctx = JobContext(claimed(), "w")
    got = []
    with pytest.raises(JobStopped) as stopped:
        for item in ctx.items([1, 2, 3]):
            got.append(item)
            ctx.request_stop(StopReason.CANCELLED)
    assert got == [1] and stopped.value.reason is StopReason.CANCELLED


def test_stop_signals() -> None:
    ctx = JobContext(claimed(), "w")
    assert not ctx.should_stop and ctx.stop_reason is None
    assert ctx.wait(0.01) is False
    ctx.raise_if_stopped()
    called = []
    ctx.on_stop(lambda: called.append(1))
    threading.Timer(0.05, ctx.request_stop, args=(StopReason.LEASE_LOST,)).start()
    began = time.monotonic()
    assert ctx.wait(5) is True
    assert time.monotonic() - began < 1
    assert ctx.stop_reason is StopReason.LEASE_LOST and called == [1]
    assert ctx.request_stop(StopReason.CANCELLED) is False  # the first reason wins
    with pytest.raises(JobStopped):
        ctx.raise_if_stopped()
    ctx.on_stop(lambda: called.append(2))  # already stopped: runs at once
    assert called == [1, 2]


# -- executor -------------------------------------------------------------------------------


def test_outcomes() -> None:
    app = App()
    app.register("ok", lambda ctx: {"echo": ctx.payload})
    app.register("boom", lambda ctx: 1 / 0)
    app.register("perm", lambda ctx: (_ for _ in ()).throw(PermanentError("bad input")))
    app.register("not_json", lambda ctx: object())

    ok = execute(app.spec("ok"), JobContext(claimed("ok", {"x": 1}), "w"))
    assert ok == Succeeded({"echo": {"x": 1}})
    boom = run(app, "boom")
    assert isinstance(boom, Failed) and boom.retryable
    assert boom.error.startswith("ZeroDivisionError: division by zero\n") and "Traceback" in boom.error
    perm = run(app, "perm")
    assert isinstance(perm, Failed) and not perm.retryable and perm.error.startswith("PermanentError: bad input")
    not_json = run(app, "not_json")
    assert isinstance(not_json, Failed) and not not_json.retryable and "not JSON" in not_json.error


def test_a_stopped_handler_is_stopped_whatever_it_returns_or_raises() -> None:
    app = App()

    def stops(ctx: JobContext) -> str:
        ctx.request_stop(StopReason.TIMEOUT)  # as the keeper would, from another thread
        return "late"

    def raises_after_stop(ctx: JobContext) -> None:
        ctx.request_stop(StopReason.CANCELLED)
        raise RuntimeError("interrupted")

    def checks(ctx: JobContext) -> None:
        ctx.request_stop(StopReason.SHUTDOWN)
        ctx.raise_if_stopped()

    app.register("stops", stops)
    app.register("raises", raises_after_stop)
    app.register("checks", checks)
    assert run(app, "stops") == Stopped(StopReason.TIMEOUT)
    assert run(app, "raises") == Stopped(StopReason.CANCELLED)
    assert run(app, "checks") == Stopped(StopReason.SHUTDOWN)


def test_async_handlers_run_on_their_own_loop_and_are_cancelled_on_stop() -> None:
    app = App()

    @app.handler()
    async def quick(ctx: JobContext) -> int:
        await asyncio.sleep(0)
        return 42

    @app.handler()
    async def slow(ctx: JobContext) -> None:
        await asyncio.sleep(30)

    assert run(app, "quick") == Succeeded(42)
    ctx = JobContext(claimed("slow"), "w")
    threading.Timer(0.1, ctx.request_stop, args=(StopReason.CANCELLED,)).start()
    began = time.monotonic()
    assert execute(app.spec("slow"), ctx) == Stopped(StopReason.CANCELLED)
    assert time.monotonic() - began < 2


def test_errors_keep_their_first_line_and_the_end_of_the_traceback() -> None:
    try:
        raise ValueError("x" * 20_000)
    except ValueError as exc:
        text = format_error(exc)
    assert len(text) <= MAX_ERROR_CHARS
    assert text.startswith("ValueError: xxx")
    assert "[... traceback cut ...]" in text


# -- small parts ------------------------------------------------------------------------------


def test_backoff_grows_with_jitter_up_to_the_cap() -> None:
    backoff = Backoff(base=0.1, cap=1.0)
    waits = [backoff.next() for _ in range(8)]
    assert 0.05 <= waits[0] <= 0.1
    assert all(0.5 <= w <= 1.0 for w in waits[5:])
    backoff.reset()
    assert backoff.next() <= 0.1
    assert all(1.0 <= jittered(2.0) <= 3.0 for _ in range(100))


def test_idle_polls_back_off_with_full_jitter_to_the_ceiling_and_snap_back_on_work() -> None:
    polls = IdlePolls(poll_seconds=0.1, max_poll_seconds=2.0, rng=random.Random(7))
    assert not polls.idle and all(0.05 <= polls.wait() <= 0.15 for _ in range(100))  # finding work: fast
    ceilings = []
    for _ in range(12):
        polls.missed()
        waits = [polls.wait() for _ in range(2000)]
        assert min(waits) >= 0
        ceilings.append(max(waits))
    assert ceilings[0] <= 0.2 and ceilings[3] <= 1.6  # doubling from the poll interval
    assert all(1.9 <= c <= 2.0 for c in ceilings[5:])  # then held at the ceiling
    assert 0.9 <= statistics.mean(polls.wait() for _ in range(5000)) <= 1.1  # full jitter: uniform in 0..2
    polls.found()
    assert not polls.idle and all(0.05 <= polls.wait() <= 0.15 for _ in range(100))


def test_a_ceiling_under_the_poll_interval_never_makes_an_idle_worker_poll_faster() -> None:
    polls = IdlePolls(poll_seconds=5.0, max_poll_seconds=1.0, rng=random.Random(7))
    for _ in range(5):
        polls.missed()
    assert max(polls.wait() for _ in range(2000)) > 4.5


def test_an_idle_workers_ceiling_grows_with_its_idle_peers_so_the_fleets_pickup_stays_a_lone_workers() -> None:
    peers = 1
    polls = IdlePolls(poll_seconds=0.1, max_poll_seconds=5.0, rng=random.Random(7), peers=lambda: peers)
    assert polls.ceiling() == 5.0  # alone (or every peer busy): --max-poll-seconds, as before
    peers = 2
    assert polls.ceiling() == pytest.approx(2 / 3 * 2 * 5.0)
    peers = 12
    assert polls.ceiling() == pytest.approx(40.0)  # 12 workers to 40 s: one look every ~1.7 s between them
    peers = 1000
    assert polls.ceiling() == FLEET_CEILING_SECONDS  # the cap: a wide fleet only finds jobs sooner
    for _ in range(20):
        polls.missed()
    assert (
        FLEET_CEILING_SECONDS * 0.45
        <= statistics.mean(polls.wait() for _ in range(5000))
        <= FLEET_CEILING_SECONDS * 0.55
    )
    # A longer --max-poll-seconds than the cap is kept: it is the floor of the ceiling.
    assert IdlePolls(0.1, 90.0, peers=lambda: 1000).ceiling() == 90.0


def test_a_worker_whose_due_jobs_are_held_by_a_limit_keeps_looking_at_the_poll_interval_spread_over_its_peers() -> None:
    peers = 1
    polls = IdlePolls(poll_seconds=0.1, max_poll_seconds=5.0, rng=random.Random(7), peers=lambda: peers)
    for _ in range(20):
        polls.missed()  # idle long enough to be at the fleet's ceiling
    for _ in range(20):
        polls.held()  # then jobs come due, and a rate limit holds them: no backing off
    assert not polls.idle and polls.holding
    assert max(polls.wait() for _ in range(2000)) <= 0.1
    peers = 30  # a fleet shares the looks: each waits longer, the fleet looks as often
    waits = [polls.wait() for _ in range(5000)]
    assert max(waits) <= 2 / 3 * 30 * 0.1 and 0.9 <= statistics.mean(waits) <= 1.1
    peers = 1000  # never past --max-poll-seconds
    assert max(polls.wait() for _ in range(2000)) <= 5.0
    polls.missed()  # the jobs are gone: idle again, from the start of the ramp
    assert polls.idle and not polls.holding and max(polls.wait() for _ in range(2000)) <= 0.2


def test_a_duty_with_an_interval_is_due_by_what_its_run_learnt_and_one_with_due_at_when_that_says() -> None:
    now = 100.0
    learnt = [1.0]

    def run() -> None:
        learnt[0] = 12.0  # e.g. a candidate's check-in: the holder's lease ends in 12 s

    wake = [150.0]
    duties = [
        Duty("leadership", run, every=5.0, due=now, fleet=False, interval=lambda: learnt[0]),
        Duty("schedule", lambda: None, every=0.5, due=now, fleet=False, due_at=lambda: wake[0]),
    ]
    maintenance = Maintenance(duties, _Health(), worker_id="w", is_leader=lambda: False, clock=lambda: now)
    assert maintenance.run_once() == ["leadership"]
    assert duties[0].due == 112.0  # asked after the run, not before it (then it was 1 s)
    now = 120.0
    wake[0] = 119.0  # a check-in said a schedule is due
    assert maintenance.run_once() == ["leadership", "schedule"]


def test_a_resting_duty_stays_due_and_runs_at_the_first_tick_after_its_rest() -> None:
    running = False  # the leader's check-in: no job runs, so the reaper rests
    now = 100.0
    reap = Duty("reap", lambda: None, every=2.0, due=now, resting=lambda: not running)
    maintenance = Maintenance([reap], _Health(), worker_id="w", is_leader=lambda: True, clock=lambda: now)
    assert maintenance.run_once() == []
    now += 30.0
    assert maintenance.run_once() == []
    running = True  # a job started
    assert maintenance.run_once() == ["reap"]


class _Health:
    def __init__(self) -> None:
        self.oks = 0
        self.failures: list[str] = []

    def failed(self, exc: StoreUnavailable, during: str) -> None:
        self.failures.append(during)

    def ok(self) -> None:
        self.oks += 1


def test_fleet_duties_run_only_while_leading_and_run_at_once_on_gaining_the_lead() -> None:
    ran: list[str] = []
    leading = False
    now = 100.0
    duties = [
        Duty("reap", lambda: ran.append("reap"), every=2.0, due=now),
        Duty("touch", lambda: ran.append("touch"), every=10.0, due=now, fleet=False),
    ]
    maintenance = Maintenance(duties, _Health(), worker_id="w", is_leader=lambda: leading, clock=lambda: now)
    assert maintenance.run_once() == ["touch"]  # not leading: only the worker's own duty
    now += 5.0
    assert maintenance.run_once() == []  # the reap stays due; the touch is not due yet
    leading = True
    assert maintenance.run_once() == ["reap"]  # the lead gained: the overdue reap runs at once
    assert ran == ["touch", "reap"]


def test_a_once_duty_is_retried_until_it_succeeds_then_never_again() -> None:
    calls = []

    def declare() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise StoreUnavailable("away")

    now = 0.0
    health = _Health()
    maintenance = Maintenance(
        [Duty("declare", declare, every=0.5, due=now, fleet=False, once=True)],
        health,
        worker_id="w",
        is_leader=lambda: False,
        clock=lambda: now,
    )
    for _ in range(10):
        maintenance.run_once()
        now += 1.0
    assert len(calls) == 2 and health.failures == ["maintenance.declare"] and health.oks == 1


def test_worker_id_is_host_pid_suffix() -> None:
    first, second = make_worker_id(), make_worker_id()
    assert re.fullmatch(r"[^:]+:\d+:[0-9a-f]{6}", first)
    assert first != second


@pytest.mark.parametrize(
    "kwargs",
    [
        {"concurrency": 0},
        {"lease_seconds": 0},
        {"grace_seconds": -1},
        {"poll_seconds": 0},
        {"max_poll_seconds": 0},
        {"queues": ()},
    ],
)
def test_worker_config_is_checked(kwargs: dict) -> None:
    with pytest.raises(InvalidInput):
        WorkerConfig(**kwargs)


def test_reap_interval_follows_the_lease_up_to_two_seconds() -> None:
    assert WorkerConfig(lease_seconds=2).reap_every == 1
    assert WorkerConfig(lease_seconds=60).reap_every == 2  # the default lease: reclaimed within ~3 s of expiry
    assert WorkerConfig(lease_seconds=600).reap_every == 2
    assert WorkerConfig(lease_seconds=0.4).reap_every == 0.5
