"""Periodic jobs: what a schedule is, and when it fires. No I/O.

A schedule names a cron expression, the time zone it is read in, and the job it
enqueues (kind, payload, queue, tenant). Expressions are parsed and stepped by
cronsim, which follows Debian's cron: five fields (minute hour day month
weekday), or six with seconds first (``*/10 * * * * *``). Daylight-saving
changes are handled as Debian's cron handles them (cronsim's README, "DST
Transitions"): a job at a fixed local time that falls in the skipped hour of a
spring-forward runs once, right after the jump; a fixed time that occurs twice
at a fall-back runs once, at the first; expressions that fire every hour or
more often step through real time and simply fire on every tick that exists.

Firing (see :func:`firing`): every scheduler pass fires each due schedule at
most once, with its latest due tick; that tick, ``schedule:NAME:2026-12-02T10:05:00Z``,
is the job's idempotency key, so however many workers fire the same tick at
once, one job exists. Workers look twice a second, so only a pass that did not
happen (no worker ran) leaves ticks behind; those missed ticks become one job
when a worker comes back (``catch_up="one"``), or none (``catch_up="skip"``:
a tick more than ``ON_TIME_SECONDS`` late is dropped, and the schedule waits for its next).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from service.errors import InvalidInput
from service.jobs import JSON, NewJob
from service.payloads import MAX_NAME_LENGTH, validate_new_job

ON_TIME_SECONDS = 10.0
"""A tick fired at most this late counts as on time; later, it was missed (no worker ran)."""

_FORWARD_STEPS = 1_000
"""Ticks stepped forward from the last one before the latest due tick is found backwards
instead (a per-second schedule after a day's outage would otherwise step 86,400 times)."""


class CatchUp(enum.StrEnum):
    """What a schedule does with ticks missed while no worker ran."""

    ONE = "one"  # one job, for the latest missed tick
    SKIP = "skip"  # none: wait for the next tick


class ScheduleSource(enum.StrEnum):
    CODE = "code"  # declared with @app.periodic; workers write it at start
    CLI = "cli"  # added at run time (jobq schedule add)


@dataclass(frozen=True)
class ScheduleSpec:
    """What a schedule is: its cron expression and the job each tick enqueues."""

    name: str
    cron: str
    kind: str
    payload: dict[str, JSON] = field(default_factory=dict)
    queue: str = "default"
    tenant: str = "default"
    timezone: str = "UTC"
    catch_up: CatchUp = CatchUp.ONE
    source: ScheduleSource = ScheduleSource.CLI


@dataclass(frozen=True)
class Schedule:
    """A stored schedule: the spec and its state."""

    spec: ScheduleSpec
    paused: bool
    next_run_at: datetime
    last_run_at: datetime | None
    last_job_id: uuid.UUID | None
    created_at: datetime
    updated_at: datetime

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class Firing:
    """One pass's decision for a due schedule: the tick to enqueue (None: skipped) and the next run."""

    tick: datetime | None
    next_run_at: datetime


def validate_spec(spec: ScheduleSpec) -> ScheduleSpec:
    """InvalidInput unless every field is usable; the spec with its enums normalised."""
    if not isinstance(spec.name, str) or not spec.name.strip() or len(spec.name) > MAX_NAME_LENGTH or ":" in spec.name:
        raise InvalidInput(
            f"a schedule's name must be a non-empty string of at most {MAX_NAME_LENGTH} characters without ':'"
        )
    zone(spec.timezone)
    try:
        next(CronSim(spec.cron, datetime.now(UTC)))  # an expression no date matches fails here too
    except (CronSimError, AttributeError, TypeError, StopIteration) as exc:
        raise InvalidInput(f"not a cron expression: {spec.cron!r} ({exc})") from None
    catch_up = catch_up_of(spec.catch_up)
    validate_new_job(job_for(spec, datetime(2000, 1, 1, tzinfo=UTC)))
    return replace(spec, catch_up=catch_up, source=ScheduleSource(spec.source))


def catch_up_of(value: CatchUp | str) -> CatchUp:
    try:
        return CatchUp(value)
    except ValueError:
        raise InvalidInput(f"catch_up must be 'one' or 'skip', not {value!r}") from None


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise InvalidInput(f"unknown time zone: {name!r} (an IANA name such as Europe/Berlin, or UTC)") from None


def next_tick(cron: str, timezone: str, after: datetime) -> datetime:
    """The first tick strictly after ``after``, in UTC."""
    return _utc(next(CronSim(cron, after.astimezone(zone(timezone)))))


def latest_tick(cron: str, timezone: str, at: datetime) -> datetime:
    """The last tick at or before ``at``, in UTC."""
    # cronsim's reverse iteration counts a start with microseconds as its own first candidate.
    start = at.astimezone(zone(timezone)) + timedelta(microseconds=1)
    return _utc(next(CronSim(cron, start, reverse=True)))


def firing(schedule: Schedule, now: datetime) -> Firing:
    """What one pass does with a schedule due at ``now`` (``next_run_at <= now``)."""
    spec = schedule.spec
    tick = schedule.next_run_at
    ticks = CronSim(spec.cron, tick.astimezone(zone(spec.timezone)))
    for _ in range(_FORWARD_STEPS):
        following = _utc(next(ticks))
        if following > now:
            break
        tick = following
    else:
        tick = max(tick, latest_tick(spec.cron, spec.timezone, now))
    late = (now - tick).total_seconds()
    fired = None if spec.catch_up is CatchUp.SKIP and late > ON_TIME_SECONDS else tick
    return Firing(tick=fired, next_run_at=next_tick(spec.cron, spec.timezone, max(now, tick)))


def tick_key(name: str, tick: datetime) -> str:
    """The idempotency key of a tick's job: the same for every worker that fires it."""
    return f"schedule:{name}:{tick.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def job_for(spec: ScheduleSpec, tick: datetime) -> NewJob:
    return NewJob(
        kind=spec.kind,
        payload=dict(spec.payload),
        queue=spec.queue,
        tenant=spec.tenant,
        idempotency_key=tick_key(spec.name, tick),
    )


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)
