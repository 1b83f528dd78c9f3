"""Periodic schedules without a database: declaring them on an App, and the rules of a spec."""

from __future__ import annotations

import pytest

from service.errors import InvalidInput
from service.schedules import CatchUp, ScheduleSource, ScheduleSpec, validate_spec
from service.worker import App, JobContext


def test_a_periodic_handler_is_declared_with_its_kind_and_queue() -> None:
    app = App()

    @app.periodic("*/5 * * * *", payload={"scope": "all"}, timezone="Europe/Berlin")
    @app.handler("reindex", queue="search")
    def reindex(ctx: JobContext) -> None: ...

    app.schedule("0 * * * *", kind="reindex", name="hourly-reindex", queue="urgent", catch_up="skip")

    hourly, every_five = app.schedules
    assert (every_five.name, every_five.kind, every_five.queue, every_five.timezone) == (
        "reindex", "reindex", "search", "Europe/Berlin",
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
