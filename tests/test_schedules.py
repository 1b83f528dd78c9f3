"""Periodic schedules without a database: declaring them on an App, and the rules of a spec."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from service.errors import InvalidInput
from service.schedules import CatchUp, Schedule, ScheduleSource, ScheduleSpec, firing, next_tick, validate_spec
from service.worker import App, JobContext


def test_a_periodic_handler_is_declared_with_its_kind_and_queue() -> None:
    app = App()

    @app.periodic("*/5 * * * *", payload={"scope": "all"}, timezone="Europe/Berlin")
    @app.handler("reindex", queue="search")
    def reindex(ctx: JobContext) -> None: ...

    app.schedule("0 * * * *", kind="reindex", name="hourly-reindex", queue="urgent", catch_up="skip")

    hourly, every_five = app.schedules
    assert (every_five.name, every_five.kind, every_five.queue, every_five.timezone) == (
        "reindex",
        "reindex",
        "search",
        "Europe/Berlin",
    )
    assert every_five.payload == {"scope": "all"} and every_five.source is ScheduleSource.CODE
    assert (hourly.name, hourly.queue, hourly.catch_up) == ("hourly-reindex", "urgent", CatchUp.SKIP)
    with pytest.raises(InvalidInput, match="declared twice"):
        app.schedule("* * * * *", kind="reindex")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cron": "* * *"}, "not a cron expression"),
        ({"cron": "99 * * * *"}, "not a cron expression"),
        ({"timezone": "Nowhere/Land"}, "unknown time zone"),
        ({"name": "a:b"}, "name"),
        ({"name": ""}, "name"),
        ({"kind": ""}, "kind"),
        ({"catch_up": "all"}, "catch_up"),
    ],
)
def test_a_bad_schedule_is_refused_with_its_reason(fields: dict[str, str], message: str) -> None:
    spec = {"name": "n", "cron": "* * * * *", "kind": "k", **fields}
    with pytest.raises(InvalidInput, match=message):
        validate_spec(ScheduleSpec(**spec))  # type: ignore[arg-type]


def fired_ticks(spec: ScheduleSpec, start: datetime, passes: int, every: timedelta) -> list[datetime]:
    """The ticks a scheduler passing every ``every`` from ``start`` fires (service.schedules.firing)."""
    now, due, fired = start, next_tick(spec.cron, spec.timezone, start), []
    for _ in range(passes):
        now += every
        if due <= now:
            decision = firing(Schedule(spec, False, due, None, None, start, start), now)
            fired += [decision.tick] if decision.tick else []
            due = decision.next_run_at
    return fired


def test_a_half_hourly_schedule_fires_on_real_time_through_a_fall_back() -> None:
    """2030-10-27 in Berlin: 02:00-03:00 happens twice (CEST, then CET); */30 fires in both."""
    spec = ScheduleSpec(name="n", cron="*/30 * * * *", kind="k", timezone="Europe/Berlin")
    fired = fired_ticks(spec, datetime(2030, 10, 26, 23, 50, tzinfo=UTC), 24, timedelta(minutes=5))
    local = [f"{t.astimezone(ZoneInfo('Europe/Berlin')):%H:%M %Z}" for t in fired]
    assert local == ["02:00 CEST", "02:30 CEST", "02:00 CET", "02:30 CET"]
