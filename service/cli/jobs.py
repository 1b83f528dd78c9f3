"""Jobs from the command line: migrate, enqueue, status, result, list, cancel."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from service.cli.app import (
    JobIdArgument,
    app,
    cli_state,
    iso,
    open_cli_store,
    parse_job_id,
    parse_payload,
    redact,
)
from service.errors import InvalidInput
from service.jobs import JobQuery, JobState, JobStatus, NewJob
from service.payloads import validate_new_job
from service.status import JobOut
from service.workflows import check_dependencies, parents_of


def status_fields(status: JobStatus) -> dict[str, Any]:
    """A job's status exactly as the REST API's ``JobOut`` shows it (one mapping, not two),
    less what only HTTP clients need (the result's URL and the poll hint)."""
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
        elif name == "parents_total":
            if not value:
                continue
            name, value = "parents", f"{value - fields['parents_pending']} of {value} done"
        elif name == "workflow_id":
            if value is None:  # an independent job: no line, as before workflows had ids
                continue
            name = "workflow"
        elif name in ("total", "max_attempts", "stale", "parents_pending"):
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
def migrate(
    ctx: typer.Context,
    wait_for_database: Annotated[
        float,
        typer.Option(
            min=0,
            metavar="SECONDS",
            help="Wait at most this long for the database to answer (retried with backoff, a line every 5 s "
            "at most), then exit 3.",
        ),
    ] = 0.0,
    lock_timeout: Annotated[
        float | None,
        typer.Option(
            min=0.01,
            metavar="SECONDS",
            help="A step waits at most this long for a table lock (a long transaction may hold one; claims "
            "would queue behind the waiting step), then rolls back and is retried with backoff. (default: 5)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Create or upgrade the database schema to the newest migration.

    One at a time: a second `jobq migrate` waits for the first (PostgreSQL advisory lock), then finds
    nothing to do. A schema ahead of this release (a rollback) is left alone: with its newer
    migrations marked compatible this says so and succeeds; otherwise one line and exit 3."""
    from service.store import migrate as migrations

    url = cli_state(ctx).settings().database_url
    found = migrations.upgrade(
        url,
        wait_seconds=wait_for_database,
        lock_timeout_seconds=lock_timeout,
        report=lambda line: print(f"jobq migrate: {line}", file=sys.stderr, flush=True),
    )
    if found.state == "ahead, compatible":
        print(f"jobq: {found.describe()}; nothing to do ({redact(url)})", file=sys.stderr)
        return
    print(f"jobq: schema is at the newest migration ({redact(url)})", file=sys.stderr)


_DEFAULTS = NewJob(kind="-", payload={})  # the options default to what a NewJob does


@app.command()
def enqueue(
    ctx: typer.Context,
    kind: Annotated[str, typer.Argument(metavar="KIND", help="The job's kind: which handler runs it.")],
    payload: Annotated[
        str,
        typer.Option(
            metavar="JSON",
            help="The handler's input, a JSON object; @FILE reads it from a file, - from stdin.",
        ),
    ] = "{}",
    queue: Annotated[str, typer.Option(metavar="Q")] = _DEFAULTS.queue,
    priority: Annotated[int, typer.Option(metavar="N", help="0..1000; higher runs first.")] = _DEFAULTS.priority,
    max_attempts: Annotated[
        int | None,
        typer.Option(metavar="N", help="1..100 attempts before it fails (default: the kind's handler's, else 3)."),
    ] = None,
    total: Annotated[int | None, typer.Option(metavar="N", help="Items to do, for progress.")] = None,
    delay: Annotated[float, typer.Option(metavar="SECONDS", help="Run no sooner than this.")] = 0.0,
    tenant: Annotated[str, typer.Option(metavar="T")] = _DEFAULTS.tenant,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            metavar="K",
            help="Enqueue once per tenant and key: the same job again prints the first one's id; "
            "another job with a used key is refused.",
        ),
    ] = None,
    after: Annotated[
        list[str] | None,
        typer.Option(
            "--after",
            metavar="ID",
            help="A parent job (repeat for more): this job waits until every one succeeded; a parent "
            "that fails or is cancelled cancels it (see --on-parent-failure).",
        ),
    ] = None,
    on_parent_failure: Annotated[
        str,
        typer.Option(metavar="cancel|run", help="When a parent fails: cancel this job (default) or run it anyway."),
    ] = _DEFAULTS.on_parent_failure,
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
        depends_on=parents_of(after or []),
        on_parent_failure=on_parent_failure,
    )
    validate_new_job(job)  # reject bad input before touching the database
    # The payload's rules (JOBQ_MAX_BODY_BYTES, depth, text) are the store's, as for every producer.
    check_dependencies([job])
    with open_cli_store(ctx) as store:
        status = store.enqueue(job)  # a key naming an earlier, different job: IdempotencyConflict
    print(status.id)


@app.command()
def status(
    ctx: typer.Context,
    job_id: JobIdArgument,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object, the REST API's field names.")] = False,
) -> None:
    """Show a job's state, progress, attempts and error."""
    parsed = parse_job_id(job_id)
    with open_cli_store(ctx) as store:
        fields = status_fields(store.get(parsed))
    print(json.dumps(fields, indent=2) if as_json else format_status(fields))


@app.command()
def result(
    ctx: typer.Context,
    job_id: JobIdArgument,
    as_json: Annotated[bool, typer.Option("--json", help="{job_id, result}, as GET /v1/jobs/{id}/result.")] = False,
) -> None:
    """Print a succeeded job's result (JSON). Exit 1 when the job has none yet, naming its state."""
    parsed = parse_job_id(job_id)
    with open_cli_store(ctx) as store:
        body = store.get_result(parsed)
    print(json.dumps({"job_id": str(parsed), "result": body} if as_json else body, indent=2))


@app.command()
def cancel(
    ctx: typer.Context,
    job_id: JobIdArgument,
) -> None:
    """Cancel a queued job now, or ask a running one to stop (it ends cancelled when its
    worker sees it, within a heartbeat). Exit 1 for a finished job."""
    parsed = parse_job_id(job_id)
    with open_cli_store(ctx) as store:
        status = store.cancel(parsed)
    if status.state is JobState.CANCELLED:
        print(f"cancelled {status.id}")
    else:
        print(f"cancel requested for {status.id}: it is {status.state.value}; its worker stops it within a heartbeat")


@app.command(name="list")
def list_jobs(
    ctx: typer.Context,
    state: Annotated[
        str | None, typer.Option(metavar="STATE", help="queued, running, succeeded, failed or cancelled.")
    ] = None,
    kind: Annotated[str | None, typer.Option(metavar="K")] = None,
    queue: Annotated[str | None, typer.Option(metavar="Q")] = None,
    tenant: Annotated[str, typer.Option(metavar="T")] = _DEFAULTS.tenant,
    limit: Annotated[int, typer.Option(metavar="N", help="Jobs per page, 1..200.")] = 50,
    after: Annotated[
        str | None, typer.Option(metavar="JOB_ID", help="The next page: the id the previous page named.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help='{"items": [...], "next_after": id or null}; items as `status --json`.')
    ] = False,
) -> None:
    """A tenant's jobs, newest first, a page at a time (keyset pages, like GET /v1/jobs)."""
    if state is not None and state not in {s.value for s in JobState}:
        raise InvalidInput(f"--state must be one of {', '.join(s.value for s in JobState)}, not {state!r}")
    query = JobQuery(
        tenant=tenant,
        state=JobState(state) if state else None,
        kind=kind,
        queue=queue,
        limit=limit,
        after_id=parse_job_id(after) if after else None,
    )
    with open_cli_store(ctx) as store:
        page = store.list_jobs(query)
    if as_json:
        items = [status_fields(status) for status in page.items]
        next_after = str(page.next_after_id) if page.next_after_id else None
        print(json.dumps({"items": items, "next_after": next_after}, indent=2))
        return
    for status in page.items:
        progress = f"{status.done}/{status.total}" if status.total is not None else str(status.done)
        print(
            f"{status.id}  {status.state.value:<9}  {status.kind:<20}  {status.queue:<12}  "
            f"{progress:>9}  {iso(status.created_at)}"
        )
    if page.next_after_id:
        print(f"more: jobq list --after {page.next_after_id} (with the same filters)", file=sys.stderr)
