"""Periodic schedules at run time: add, list, pause, resume, delete (service.schedules says
how a schedule fires; every worker fires the due ones)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from service.cli.app import app, iso, open_cli_store, parse_payload
from service.errors import ScheduleNotFound
from service.schedules import Schedule, ScheduleSource, ScheduleSpec, catch_up_of, next_tick, validate_spec

schedule_app = typer.Typer(
    help="Periodic jobs: a job enqueued on every tick of a cron expression.", no_args_is_help=True
)
app.add_typer(schedule_app, name="schedule")

NAME_HELP = "The schedule's name (a job's idempotency key is schedule:NAME:TICK)."


@schedule_app.command("add")
def schedule_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help=NAME_HELP)],
    cron: Annotated[
        str,
        typer.Option(metavar="EXPR", help="Five fields (minute hour day month weekday), or six with seconds first."),
    ],
    kind: Annotated[str, typer.Option(metavar="KIND", help="The kind of the job each tick enqueues.")],
    payload: Annotated[
        str, typer.Option(metavar="JSON", help="The jobs' payload: a JSON object, @FILE, or - for stdin.")
    ] = "{}",
    queue: Annotated[str, typer.Option(metavar="Q", help="The jobs' queue.")] = "default",
    tenant: Annotated[str, typer.Option(metavar="T", help="The jobs' tenant.")] = "default",
    timezone: Annotated[
        str, typer.Option(metavar="TZ", help="The zone the expression is read in (IANA name).")
    ] = "UTC",
    catch_up: Annotated[
        str,
        typer.Option(metavar="one|skip", help="Ticks missed while no worker ran: one job for them all, or none."),
    ] = "one",
) -> None:
    """Add a schedule, or redefine the one of that name (its pause and next run are kept
    unless the expression or the zone changed)."""
    spec = validate_spec(
        ScheduleSpec(
            name=name,
            cron=cron,
            kind=kind,
            payload=parse_payload(payload),
            queue=queue,
            tenant=tenant,
            timezone=timezone,
            catch_up=catch_up_of(catch_up),
            source=ScheduleSource.CLI,
        )
    )
    with open_cli_store(ctx) as store:
        saved = store.save_schedule(spec, next_tick(spec.cron, spec.timezone, store.database_now()))
    print(f"schedule {saved.name}: next run {iso(saved.next_run_at)}", file=sys.stderr)


@schedule_app.command("list")
def schedule_list(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Every schedule with its next run (UTC), last run and state."""
    with open_cli_store(ctx) as store:
        schedules = store.list_schedules()
    for schedule in schedules:
        if as_json:
            print(json.dumps(schedule_fields(schedule)))
        else:
            state = "paused" if schedule.paused else f"next {iso(schedule.next_run_at)}"
            spec = schedule.spec
            print(
                f"{spec.name}  {spec.cron!r} {spec.timezone}  {spec.kind} on {spec.queue}  {state}"
                f"  last {iso(schedule.last_run_at) or 'never'}  ({spec.source.value}, catch-up {spec.catch_up.value})"
            )


@schedule_app.command("pause")
def schedule_pause(ctx: typer.Context, name: Annotated[str, typer.Argument(metavar="NAME", help=NAME_HELP)]) -> None:
    """Stop firing the schedule until it is resumed."""
    with open_cli_store(ctx) as store:
        store.set_schedule_paused(name, True)
    print(f"paused {name}", file=sys.stderr)


@schedule_app.command("resume")
def schedule_resume(ctx: typer.Context, name: Annotated[str, typer.Argument(metavar="NAME", help=NAME_HELP)]) -> None:
    """Fire the schedule again from its next tick (ticks while it was paused are not caught up)."""
    with open_cli_store(ctx) as store:
        schedule = next((s for s in store.list_schedules() if s.name == name), None)
        if schedule is None:
            raise ScheduleNotFound(name)
        spec = schedule.spec
        resumed = store.set_schedule_paused(name, False, next_tick(spec.cron, spec.timezone, store.database_now()))
    print(f"resumed {name}: next run {iso(resumed.next_run_at)}", file=sys.stderr)


@schedule_app.command("delete")
def schedule_delete(ctx: typer.Context, name: Annotated[str, typer.Argument(metavar="NAME", help=NAME_HELP)]) -> None:
    """Remove the schedule (the jobs it enqueued stay). One declared in code (@app.periodic)
    comes back when a worker of that app starts: remove it from the code, or pause it."""
    with open_cli_store(ctx) as store:
        store.delete_schedule(name)
    print(f"deleted {name}", file=sys.stderr)


def schedule_fields(schedule: Schedule) -> dict[str, object]:
    spec = schedule.spec
    return {
        "name": spec.name,
        "cron": spec.cron,
        "timezone": spec.timezone,
        "kind": spec.kind,
        "payload": spec.payload,
        "queue": spec.queue,
        "tenant": spec.tenant,
        "catch_up": spec.catch_up.value,
        "source": spec.source.value,
        "paused": schedule.paused,
        "next_run_at": iso(schedule.next_run_at),
        "last_run_at": iso(schedule.last_run_at),
        "last_job_id": str(schedule.last_job_id) if schedule.last_job_id else None,
    }
