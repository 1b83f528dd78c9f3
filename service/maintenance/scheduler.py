"""The scheduler: periodic schedules enqueue their jobs, one per tick across the fleet.

Run by the fleet's leader, like the reaper (service.maintenance.leadership), and only when a
schedule is due: each read says when the next one is (:meth:`Scheduler.due_at`), and the
leader's check-in, every few seconds, says so too (:meth:`Scheduler.expect`), so a schedule
added, resumed or changed by the CLI is noticed within one check-in (a third of the
leadership's lease: 5 s by default, well inside a tick's ON_TIME_SECONDS). An idle fleet
without due schedules reads nothing (issue 24: it used to read twice a second), and a
one-second schedule is still read for every tick. A pass reads the due schedules with the database's clock
("now" is never this host's), decides each one's firing (:func:`service.schedules.firing`:
the latest due tick, or none when a missed tick is to be skipped), enqueues the tick's
job under the tick's idempotency key, then moves the schedule on with a
compare-and-set fenced with the leader's token. A leader and a deposed one that has
not noticed yet, firing the same tick, insert one job between them (the key is unique
per tenant) and only the leader moves the row on; a worker that
dies between the two steps leaves the schedule due, and the next pass finds the
job already there. The schedules an app declares (``@app.periodic``) are written on
the first pass, keeping whatever an operator changed at run time (paused, next run).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from service.errors import IdempotencyConflict, InvalidInput
from service.maintenance.leadership import LeaderToken, unfenced
from service.schedules import ScheduleSpec, firing, job_for, next_tick
from service.store.base import Store
from service.store.schedule_rows import DUE_SCHEDULES_BATCH

logger = logging.getLogger("jobq.maintenance")

SCHEDULE_SECONDS = 0.5
"""How often a worker retries writing the app's declared schedules until it succeeds."""

RETRY_SECONDS = 1.0
"""After a pass that failed (the database away), the next is due in this."""

IDLE_SECONDS = 60.0
"""The longest wait between passes: a safety net, since the leader's check-in says when the
next schedule is due every few seconds (:meth:`Scheduler.expect`)."""

MARGIN_SECONDS = 0.02
"""A pass is due this long after the next run by the database clock, so the read finds it due
(the host's monotonic clock and the database's may tick apart by a little over a wait)."""


@dataclass(frozen=True)
class SchedulerResult:
    fired: int = 0  # schedules this pass moved on with a job
    skipped: int = 0  # schedules moved on without one (a missed tick, catch_up="skip", or a job refused)
    taken: int = 0  # due schedules another worker moved on first


class Scheduler:
    def __init__(
        self,
        store: Store,
        declared: Sequence[ScheduleSpec] = (),
        *,
        leader: LeaderToken = unfenced,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._due_at = -math.inf  # by the monotonic clock: the first pass is due at once
        # The token each firing is fenced with (service.maintenance.leadership): asked before the
        # tick's job is enqueued (a lapsed leader enqueues nothing) and given to the compare-and-set.
        self.leader = leader
        self.declared = tuple(declared)
        self._synced = not self.declared

    def sync(self) -> None:
        """Write the app's declared schedules (a new one is due at its first tick from now)."""
        now = self.store.database_now()
        for spec in self.declared:
            self.store.save_schedule(spec, next_tick(spec.cron, spec.timezone, now))
        self._synced = True

    def due_at(self) -> float:
        """When the next pass is due, by the monotonic clock."""
        with self._lock:
            return self._due_at

    def expect(self, seconds: float | None) -> None:
        """The next schedule is due in ``seconds`` by the database clock (None: no schedule is
        unpaused): the next pass is due then at the latest."""
        if seconds is not None:
            self._due_within(seconds, self._monotonic())

    def _due_within(self, seconds: float, since: float) -> None:
        at = since + max(seconds, 0.0) + MARGIN_SECONDS
        with self._lock:
            self._due_at = min(self._due_at, at)

    def run_once(self) -> SchedulerResult:
        """Fire every due schedule once; what was done."""
        started = self._monotonic()
        with self._lock:
            self._due_at = started + RETRY_SECONDS  # kept if the pass fails
        if not self._synced:
            self.sync()
        now, due, following = self.store.due_schedules()
        with self._lock:
            self._due_at = started + IDLE_SECONDS
        if following is not None:
            self._due_within((following - now).total_seconds(), started)
        if len(due) >= DUE_SCHEDULES_BATCH:
            self._due_within(0.0, started)  # more are due than one read returns
        fired = skipped = taken = 0
        for schedule in due:
            try:
                decision = firing(schedule, now)
            except InvalidInput as exc:  # e.g. a time zone this host's tzdata lacks: the others still fire
                logger.error("scheduler.invalid", extra={"jobq_fields": {"schedule": schedule.name, "error": str(exc)}})
                continue
            job_id = None
            leader = self.leader()
            if decision.tick is not None:
                try:
                    [status] = self.store.enqueue_many([job_for(schedule.spec, decision.tick)])
                    job_id = status.id
                # A schedule whose job the store refuses: the next tick may pass. IdempotencyConflict: the
                # tick's job exists already, made from the schedule as it was before a change.
                except (InvalidInput, IdempotencyConflict) as exc:
                    logger.error(
                        "scheduler.refused", extra={"jobq_fields": {"schedule": schedule.name, "error": str(exc)}}
                    )
            self._due_within(_seconds(decision.next_run_at, now), started)
            moved = self.store.advance_schedule(
                schedule.name,
                schedule.next_run_at,
                decision.next_run_at,
                decision.tick if job_id else None,
                job_id,
                leader=leader,
            )
            if not moved:
                taken += 1
            elif job_id is None:
                skipped += 1
            else:
                fired += 1
        result = SchedulerResult(fired=fired, skipped=skipped, taken=taken)
        if fired or skipped:
            logger.info("scheduler.fired", extra={"jobq_fields": {"fired": fired, "skipped": skipped}})
        return result


def _seconds(at: datetime, now: datetime) -> float:
    return (at - now).total_seconds()
