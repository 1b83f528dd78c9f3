"""A worker's maintenance: duties, each a ``run_once`` at its own (jittered) interval, and one thin loop.

Two kinds of duty:

- **fleet duties** — the reaper, the scheduler, the rollup's fold, retention — are the
  fleet's to do once, not each worker's. The loop runs them only while this worker holds
  the leadership lease (:mod:`service.maintenance.leadership`), and each write they make
  is fenced with the lease's token, so a deposed leader that has not noticed yet writes
  nothing. A duty skipped because this worker does not lead stays due: the tick after it
  gains the lead, it runs (a new leader reaps at once). A write refused for a lost lease
  (LeadershipLost) makes this worker stop leading until it takes the lease again;
- **worker duties** — taking or renewing the lease with the worker's check-in, which is
  also its workers-table touch (service.maintenance.presence), writing the app's declared
  schedules — are this worker's own and run on every worker.

``is_leader`` is asked at every tick for every due fleet duty, so it must not do I/O:
it reads what the lease's own duty last learnt. The lease's duty is first in the list,
so the tick that gains the lead runs the overdue fleet duties.

Each duty's error is its own: a schedule that errs cannot hold back the reaper. A
database outage is reported once through ``health`` (``failed``/``ok``), and only a
duty that ran (reached the database) may end it.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from service.errors import LeadershipLost, StoreUnavailable
from service.maintenance.leadership import Leadership
from service.maintenance.pruner import Pruner
from service.maintenance.reaper import Reaper
from service.maintenance.rollup import Rollup
from service.maintenance.scheduler import SCHEDULE_SECONDS, Scheduler
from service.store.base import Store

logger = logging.getLogger("jobq.maintenance")

TICK_SECONDS = 0.2
"""How often the loop looks for due duties: the finest interval any duty may have."""

REAP_SECONDS = 2.0
"""The default reap interval's ceiling (WorkerConfig.reap_seconds)."""

RETENTION_BATCH = 50
"""Jobs a worker's retention deletes per turn (WorkerConfig.retention_seconds)."""

RETENTION_EVERY = 5.0
"""Seconds between a worker's retention turns (+-50 % jitter): 50 jobs every 5 s is 864,000
a day from one worker, nine times 100,000 a day, while each turn is a few milliseconds of one
backend, too short and too rare for a claim to notice (docs/PERFORMANCE.md, "Retention").
"""

ROLLUP_IDLE_SECONDS = 60.0
"""After a fold that folded nothing, the next is due in this (+-20 %) instead of ``rollup_every``."""

ROLLUP_RETENTION_EVERY = 3_600.0
"""Seconds between a worker's turns at the rollup's retention: whole days go, so hourly is enough."""


class Health(Protocol):
    """Where an outage is told (service.worker.health.StoreHealth): once when it starts, once when it ends."""

    def failed(self, exc: StoreUnavailable, during: str) -> None: ...

    def ok(self) -> None: ...


@dataclass
class Duty:
    """A maintenance task: ``run`` (which may raise StoreUnavailable) once ``due``, then again
    ``every`` seconds (+- ``spread``, a fraction, so a fleet's duties do not line up) after each
    run began. ``fleet``: only the leader runs it. ``once``: done for good when a run succeeds
    (until then retried every ``every``). ``interval``: when given, the wait after each run
    comes from it instead (the leadership's, which knows when the lease is next worth asking for)."""

    name: str
    run: Callable[[], object]
    every: float
    due: float
    spread: float = 0.5
    fleet: bool = True
    once: bool = False
    interval: Callable[[], float] | None = None
    due_at: Callable[[], float] | None = None
    """When given, the duty is due when it says (asked at every tick; the scheduler's, which
    its own reads and the check-ins move), instead of ``due``."""

    resting: Callable[[], bool] | None = None
    """When given and True, the duty is not run; it stays due, so it runs at the first tick after
    (the reaper's, while the leader's check-in says no job runs)."""

    def is_due(self, now: float) -> bool:
        if self.resting is not None and self.resting():
            return False
        return now >= (self.due_at() if self.due_at is not None else self.due)

    def next_due(self, now: float) -> float:
        if self.interval is not None:
            return now + self.interval()
        return now + random.uniform(self.every * (1 - self.spread), self.every * (1 + self.spread))


class Maintenance:
    """The loop: at every tick, each due duty once (the fleet's only while leading)."""

    def __init__(
        self,
        duties: Sequence[Duty],
        health: Health,
        *,
        worker_id: str,
        is_leader: Callable[[], bool],
        lost: Callable[[LeadershipLost], None] = lambda exc: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``lost``: told when a fleet duty's write was refused for a lease this worker no longer holds."""
        self.duties = list(duties)
        self.health = health
        self.worker_id = worker_id
        self.is_leader = is_leader
        self.lost = lost
        self.clock = clock

    def run_once(self) -> list[str]:
        """Run every duty that is due (a fleet duty only while leading); the names of those that ran."""
        ran: list[str] = []
        for duty in self.duties:
            now = self.clock()
            if not duty.is_due(now) or (duty.fleet and not self.is_leader()):
                continue
            duty.due = duty.next_due(now)
            ran.append(duty.name)
            try:
                duty.run()
            except StoreUnavailable as exc:
                self.health.failed(exc, f"maintenance.{duty.name}")
            except LeadershipLost as exc:
                # Nothing was written (the fence); the database answered, so no outage either.
                self.lost(exc)
            except Exception:
                logger.error(
                    "worker.maintenance_error",
                    exc_info=True,
                    extra={"jobq_fields": {"worker": self.worker_id, "duty": duty.name}},
                )
            else:
                # Only a call that reached the database says it is back; a tick with
                # nothing due says nothing (it ended outages early, with a false down_s).
                self.health.ok()
                if duty.once:
                    duty.due = math.inf
            finally:
                if duty.interval is not None:  # asked again after the run, which changed what it knows
                    duty.due = duty.next_due(self.clock())
                # Which worker ran what, when and for how long: the fleet tests read it to show that
                # one worker at a time runs the fleet's duties.
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug(
                        "maintenance.ran",
                        extra={"jobq_fields": {"worker": self.worker_id, "duty": duty.name, "s": self.clock() - now}},
                    )
        return ran

    def run(self, halt: threading.Event) -> None:
        """Tick until ``halt`` is set."""
        while not halt.wait(TICK_SECONDS):
            self.run_once()


def worker_duties(
    store: Store,
    worker_id: str,
    *,
    leadership: Leadership,
    reaper: Reaper,
    scheduler: Scheduler,
    pruner: Pruner | None,
    reap_every: float,
    rollup_every: float,
    retention_every: float,
    jobs_requeued: Callable[[], None],
    jobs_running: Callable[[], bool] = lambda: True,
    clock: Callable[[], float] = time.monotonic,
) -> list[Duty]:
    """What a worker's maintenance thread does. ``jobs_requeued`` is told when a reap put jobs
    back in the queue (the worker then looks for them at once). Another duty is one more entry here.

    The leadership's duty is also the worker's touch: the lease is asked for with the worker's
    check-in (service.maintenance.presence), one statement that marks it alive and learns
    when the next schedule is due, so the scheduler's duty is due only then (``due_at``),
    and whether any job runs (``jobs_running``): the reaper rests while none does, since
    only a running job's lease can expire. A job that starts meanwhile is seen at the
    leader's next check-in (a third of its lease, 5 s, at most), and reaped on the usual
    cadence from then: a killed worker's job whose lease is longer than that comes back as
    soon as before."""
    now = clock()

    def reap() -> None:
        if reaper.run_once().requeued:
            jobs_requeued()  # jobs came back due (or soon): look

    rollup = Rollup(store, leader=leadership.token)
    folded = [True]  # the last fold folded something (the first is due soon)

    def fold() -> None:
        folded[0] = rollup.run_once() > 0

    def fold_interval() -> float:
        # A fold that found nothing comes back in a minute: a job is folded SETTLE_SECONDS (a
        # minute) after it finished anyway, so an idle fleet's leader need not look every 10 s.
        every = rollup_every if folded[0] else max(rollup_every, ROLLUP_IDLE_SECONDS)
        return random.uniform(every * 0.8, every * 1.2)

    return [
        # First, so the tick that gains the lead runs the fleet's overdue duties.
        Duty(
            "leadership",
            leadership.run_once,
            leadership.renew_seconds,
            due=now,
            fleet=False,
            interval=leadership.next_interval,
        ),  # fmt: skip
        # A new leader reaps at once: a fleet restart finds its own orphans.
        Duty("reap", reap, reap_every, due=now, resting=lambda: not jobs_running()),
        # The app's own schedules are written by each worker that declares them, leader or
        # not; firing them is the fleet's.
        *(
            [Duty("declare_schedules", scheduler.sync, SCHEDULE_SECONDS, due=now, fleet=False, once=True)]
            if scheduler.declared
            else []
        ),
        # The analysts' daily rollup.
        Duty("rollup", fold, rollup_every, due=now + rollup_every, interval=fold_interval),
        # Due when a schedule is: its reads and the check-ins say when (service.maintenance.scheduler).
        Duty("schedule", scheduler.run_once, SCHEDULE_SECONDS, due=now, due_at=scheduler.due_at),
        *_retention_duties(pruner, worker_id, retention_every, now),
    ]


def _retention_duties(pruner: Pruner | None, worker_id: str, every: float, now: float) -> list[Duty]:
    """Retention (the prune skips rows another worker holds)."""
    if pruner is None:
        return []

    def prune() -> None:
        deleted = pruner.run_once()
        if deleted:
            logger.debug("worker.retention_pruned", extra={"jobq_fields": {"worker": worker_id, "deleted": deleted}})

    retention = Duty("retention", prune, every, due=now)
    rollup_retention = Duty("rollup_retention", pruner.prune_rollup, ROLLUP_RETENTION_EVERY, due=now)
    # Neither at start: a fleet restarted together would prune together. Both first within ~every.
    retention.due, rollup_retention.due = retention.next_due(now), retention.next_due(now)
    return [retention, rollup_retention]
