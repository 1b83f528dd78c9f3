"""The scheduler: periodic schedules enqueue their jobs, one per tick across the fleet.

Run by the fleet's leader, like the reaper (service.maintenance.leadership): the leading
worker runs ``run_once`` about twice a second (``SCHEDULE_SECONDS``). A pass reads the due schedules with the database's clock
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
from collections.abc import Sequence
from dataclasses import dataclass

from service.errors import IdempotencyConflict, InvalidInput
from service.maintenance.leadership import LeaderToken, unfenced
from service.schedules import ScheduleSpec, firing, job_for, next_tick
from service.store.base import Store

logger = logging.getLogger("jobq.maintenance")

SCHEDULE_SECONDS = 0.5
"""How often each worker looks for due schedules (+-50 % jitter): under a second, so a
schedule as fine as one second fires every tick while any worker runs."""


@dataclass(frozen=True)
class SchedulerResult:
    fired: int = 0  # schedules this pass moved on with a job
    skipped: int = 0  # schedules moved on without one (a missed tick, catch_up="skip", or a job refused)
    taken: int = 0  # due schedules another worker moved on first


class Scheduler:
    def __init__(self, store: Store, declared: Sequence[ScheduleSpec] = (), *, leader: LeaderToken = unfenced) -> None:
        self.store = store
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

    def run_once(self) -> SchedulerResult:
        """Fire every due schedule once; what was done."""
        if not self._synced:
            self.sync()
        now, due = self.store.due_schedules()
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
