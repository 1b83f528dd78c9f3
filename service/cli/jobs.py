"""Jobs from the command line: migrate, enqueue, status."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Annotated, Any

import typer

from service.cli.app import (
    app,
    cli_state,
    open_cli_store,
    parse_job_id,
    parse_payload,
    redact,
)
from service.jobs import JobStatus, NewJob
from service.payloads import validate_new_job


def status_fields(status: JobStatus) -> dict[str, Any]:
    """A job's status exactly as the REST API's ``JobOut`` shows it (one mapping, not two),
    less what only HTTP clients need (the result's URL and the poll hint)."""
    from service.api.schemas import (
        JobOut,  # imported here: the API package loads FastAPI, which other commands skip
    )

    return JobOut.of(status, None).model_dump(mode="json", exclude={"result_url", "poll_after_seconds"})



def format_status(fields: dict[str, Any]) -> str:
    """The human-readable status: one ``name  value`` line per field, the error last."""
    lines = []
    for name, value in fields.items():
        if name == "error":
            continue
        if name == "state" and fields["stale"]:
            value = f"{value} (stale: the lease expired; its worker is gone or stuck)"
        elif name == "done" and fields["total"] is not None:
            value = f"{value} of {fields['total']}"
        elif name == "attempts":
            value = f"{value} of {fields['max_attempts']}"
        elif name in ("total", "max_attempts", "stale"):
            continue
        elif isinstance(value, bool):
            value = "yes" if value else "no"
        elif value is None:
            value = "-"
        lines.append(f"{name:<17} {value}")
    if fields["error"]:
        lines.append("error:")
        lines.extend("  " + line for line in fields["error"].splitlines())
    return "\n".join(lines)


# -- commands ------------------------------------------------------------------------


@app.command()
def migrate(ctx: typer.Context) -> None:
    """Create or upgrade the database schema to the newest migration."""
    from service.store import migrate as migrations

    url = cli_state(ctx).settings().database_url
    migrations.upgrade(url)
    print(f"jobq: schema is at the newest migration ({redact(url)})", file=sys.stderr)


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(NewJob)}


@app.command()
def enqueue(
    ctx: typer.Context,
    kind: Annotated[str, typer.Argument(help="The job's kind: which handler runs it.")],
    payload: Annotated[str, typer.Option(metavar="JSON", help="The handler's input, a JSON object.")] = "{}",
    queue: Annotated[str, typer.Option(metavar="Q")] = _DEFAULTS["queue"],
    priority: Annotated[int, typer.Option(metavar="N", help="0..1000; higher runs first.")] = _DEFAULTS[
        "priority"
    ],
    max_attempts: Annotated[int, typer.Option(metavar="N", help="1..100 attempts before it fails.")] = _DEFAULTS[
        "max_attempts"
    ],
    total: Annotated[int | None, typer.Option(metavar="N", help="Items to do, for progress.")] = None,
    delay: Annotated[float, typer.Option(metavar="SECONDS", help="Run no sooner than this.")] = 0.0,
    tenant: Annotated[str, typer.Option(metavar="T")] = _DEFAULTS["tenant"],
    idempotency_key: Annotated[
        str | None,
        typer.Option(metavar="K", help="Enqueue once per tenant and key; a repeat prints the first job's id."),
    ] = None,
) -> None:
    """Add a job to the queue; print only its id on stdout."""
    job = NewJob(
        kind=kind,
        payload=parse_payload(payload),
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        total=total,
        delay_seconds=delay,
        tenant=tenant,
        idempotency_key=idempotency_key,
    )
    validate_new_job(job)  # reject bad input before touching the database
    with open_cli_store(ctx) as store:
        status = store.enqueue(job)
    print(status.id)


@app.command()
def status(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID", help="The id `jobq enqueue` printed.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object, the REST API's field names.")] = False,
) -> None:
    """Show a job's state, progress, attempts and error."""
    parsed = parse_job_id(job_id)
    with open_cli_store(ctx) as store:
        fields = status_fields(store.get(parsed))
    print(json.dumps(fields, indent=2) if as_json else format_status(fields))


