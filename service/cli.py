"""The ``jobq`` command: thin, calls the layers below, never writes SQL.

Each command is one small function on ``app``; to add one, write another
``@app.command()`` function that takes ``ctx`` and uses :func:`open_cli_store`.

Output: results on stdout (``enqueue`` prints only the id, so scripts can
capture it), everything else on stderr. An error is one line, ``error: ...``,
on stderr, with no traceback, and one of these exit codes (:func:`exit_code`
is the one place that maps the exception tree of :mod:`service.errors`):

    0  success
    1  the command ran but cannot do it: no such job, the job's state forbids it,
       an idempotency key reused for a different job
    2  usage or input error (bad option, invalid JSON, malformed id, bad setting):
       rejected before anything was written
    3  the database is unreachable, or its schema is not migrated: retry later,
       or run ``jobq migrate``
"""

from __future__ import annotations

import dataclasses
import getpass
import importlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import pydantic
import typer

from service.config import Settings, load_settings
from service.durations import format_duration, parse_duration
from service.errors import InvalidInput, JobqError, StoreUnavailable
from service.jobs import (
    FailureGroup,
    JobStatus,
    NewJob,
    QueueStats,
    ReplayFilter,
    validate_new_job,
)
from service.store import Store, open_store

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3

app = typer.Typer(
    name="jobq",
    help="jobq: a job queue for long-running work, stored in PostgreSQL or SQLite.",
    add_completion=False,
    pretty_exceptions_enable=False,
)


# -- plumbing ------------------------------------------------------------------------


@dataclasses.dataclass
class CliState:
    """What the global options leave for the commands. Settings are read lazily,
    so ``--help`` works whatever the environment holds."""

    database_url: str | None = None

    def settings(self) -> Settings:
        overrides: dict[str, object] = {}
        if self.database_url is not None:
            overrides["database_url"] = self.database_url
        try:
            return load_settings(**overrides)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "settings"
            raise InvalidInput(f"invalid setting JOBQ_{field.upper()}: {first['msg']}") from exc


@app.callback()
def _global_options(
    ctx: typer.Context,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            metavar="URL",
            help="postgresql://… or sqlite:///path; overrides JOBQ_DATABASE_URL "
            "(default sqlite:///./jobq.db).",
            show_default=False,
        ),
    ] = None,
) -> None:
    ctx.obj = CliState(database_url=database_url)


def cli_state(ctx: typer.Context) -> CliState:
    state = ctx.find_object(CliState)
    if state is None:  # a command invoked without the group (tests that call it directly)
        state = CliState()
    return state


@contextmanager
def open_cli_store(ctx: typer.Context) -> Iterator[Store]:
    """The store for the settings in effect, closed when the command ends."""
    store = open_store(cli_state(ctx).settings())
    try:
        yield store
    finally:
        store.close()


def exit_code(exc: JobqError) -> int:
    """The exit code for each branch of the exception tree (see the module docstring)."""
    if isinstance(exc, InvalidInput):
        return EXIT_USAGE
    if isinstance(exc, StoreUnavailable):
        return EXIT_UNAVAILABLE
    # NotFound, InvalidTransition, IdempotencyConflict and the rest: the command ran, the answer is no.
    return EXIT_FAILED


def fail(message: str, code: int) -> None:
    """One line on stderr; never a traceback."""
    first_line = message.strip().splitlines()[0] if message.strip() else "unknown error"
    print(f"error: {first_line}", file=sys.stderr)
    raise SystemExit(code)


def parse_job_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise InvalidInput(f"not a job id (expected a UUID): {text!r}") from None


def parse_payload(text: str) -> dict[str, Any]:
    def reject_constant(name: str) -> None:
        raise InvalidInput(f"--payload is not valid JSON: {name} is not allowed")

    try:
        value = json.loads(text, parse_constant=reject_constant)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"--payload is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidInput(f"--payload must be a JSON object, not {type(value).__name__}")
    return value


def status_fields(status: JobStatus) -> dict[str, Any]:
    """A job's status exactly as the REST API's ``JobOut`` shows it (one mapping, not two),
    less what only HTTP clients need (the result's URL and the poll hint)."""
    from service.api.schemas import (
        JobOut,  # imported here: the API package loads FastAPI, which other commands skip
    )

    return JobOut.of(status, None).model_dump(mode="json", exclude={"result_url", "poll_after_seconds"})


def _iso(moment: datetime | None) -> str | None:
    """ISO-8601 in UTC, spelled as pydantic (and so the API) spells it."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


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
    with _migration_errors():
        migrations.upgrade(url)
    print(f"jobq: schema is at the newest migration ({_redact(url)})", file=sys.stderr)


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


@app.command()
def worker(
    ctx: typer.Context,
    app_ref: Annotated[
        str,
        typer.Option(
            "--app",
            metavar="MODULE[:ATTR]",
            help="The App whose handlers to run (ATTR defaults to `app`), e.g. service.examples. "
            "The current directory is importable.",
        ),
    ],
    queues: Annotated[
        str | None,
        typer.Option(metavar="Q1,Q2", help="Comma-separated queues to claim from (default: the queues the app's handlers name)."),
    ] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, max=1000, metavar="N", help="Jobs run at once, one thread each; claims only for free slots.")
    ] = 4,
    lease_seconds: Annotated[
        float | None,
        typer.Option(
            min=0.1, max=86_400, metavar="S",
            help="Lease per job, renewed by heartbeats every S/3; a dead worker's jobs come back after about S. "
            "(default: JOBQ_LEASE_SECONDS, 60)",
        ),
    ] = None,
    grace_seconds: Annotated[
        float,
        typer.Option(
            min=0, metavar="G",
            help="On SIGTERM/SIGINT: stop claiming, let running jobs finish for G seconds, then hand them back "
            "to the queue and exit 0. A second signal exits at once. Also how long a job told to stop "
            "(cancelled, timed out) may take to return.",
        ),
    ] = 30.0,
    poll_seconds: Annotated[
        float,
        typer.Option(min=0.05, metavar="P", help="Claim at least every P seconds (+-50% jitter) even without a "
                     "LISTEN/NOTIFY wake-up; SQLite relies on this alone."),
    ] = 2.0,
    log_level: Annotated[
        str, typer.Option(metavar="LEVEL", help="debug, info, warning or error. Logs are JSON lines on stderr.")
    ] = "info",
) -> None:
    """Run jobs of the app's kinds until SIGTERM/SIGINT (see `Workers` in the README).

    Uses at most JOBQ_POOL_SIZE + 1 database connections (3 by default), whatever --concurrency is.
    """
    import os

    from service.retry import RetryPolicy
    from service.worker import Worker, WorkerConfig, load_app
    from service.worker.logs import configure_logging

    if log_level.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise InvalidInput(f"--log-level must be debug, info, warning or error, not {log_level!r}")
    settings = cli_state(ctx).settings()
    config = WorkerConfig(
        queues=tuple(q.strip() for q in queues.split(",")) if queues else None,
        concurrency=concurrency,
        lease_seconds=lease_seconds if lease_seconds is not None else settings.lease_seconds,
        grace_seconds=grace_seconds,
        poll_seconds=poll_seconds,
        listen=settings.notify,
    )
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # `--app myhandlers` finds ./myhandlers.py, as uvicorn does
    handlers = load_app(app_ref)
    configure_logging(log_level)
    with open_cli_store(ctx) as store:
        policy = RetryPolicy(settings.retry_base_seconds, settings.retry_cap_seconds)
        Worker(store, handlers, config, retry_policy=policy).run()


# -- operations: failures, replay, alerts, stats, retention (README: Operations) ---------------


@app.command()
def failures(
    ctx: typer.Context,
    since: Annotated[str, typer.Option(metavar="DURATION", help="How far back: 30s, 15m, 24h, 42d.")] = "24h",
    kind: Annotated[str | None, typer.Option(metavar="K", help="Only this kind.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON, the fields of GET /v1/failures.")] = False,
) -> None:
    """Failed jobs grouped by kind and error, ids and numbers masked.

    One bug is one line, however many jobs it failed. Every tenant's jobs
    (GET /v1/failures shows one tenant's); one indexed query.
    """
    start = _ago(since, "--since")
    with open_cli_store(ctx) as store:
        groups = store.failure_groups(start, kind)
    if as_json:
        print(json.dumps({"since": _iso(start), "groups": [_failure_fields(g) for g in groups]}, indent=2))
    elif groups:
        rows = [
            [g.count, g.kind, _iso(g.last_seen), _iso(g.first_seen), g.example_job_id, g.error_group or "-"]
            for g in groups
        ]
        print(_table(["COUNT", "KIND", "LAST SEEN", "FIRST SEEN", "EXAMPLE JOB", "ERROR"], rows, right=("COUNT",)))
    else:
        print(f"jobq: no failed jobs since {_iso(start)}", file=sys.stderr)


@app.command()
def replay(
    ctx: typer.Context,
    ids: Annotated[
        list[str] | None, typer.Option("--id", metavar="ID", help="A job to replay; repeat for more.")
    ] = None,
    kind: Annotated[str | None, typer.Option(metavar="K", help="Replay the failed jobs of this kind.")] = None,
    error_like: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Only jobs whose error contains TEXT (any case).")
    ] = None,
    since: Annotated[
        str | None, typer.Option(metavar="DURATION", help="Only jobs that ended this recently (e.g. 24h).")
    ] = None,
    include_cancelled: Annotated[
        bool, typer.Option(help="Cancelled jobs of the kind too (jobs named by --id are replayed either way).")
    ] = False,
    dry_run: Annotated[bool, typer.Option(help="List the jobs that would be replayed; change nothing.")] = False,
) -> None:
    """Put failed jobs back in the queue, attempts 0, recorded as yours (cli:USER).

    --id or --kind, or both: every option given narrows the others
    (POST /v1/jobs/replay takes the same filter). Prints how many; with
    --dry-run, the ids one per line. Named jobs that were not replayed
    (no such job, not failed or cancelled, or filtered out) exit 1.
    """
    named = tuple(dict.fromkeys(parse_job_id(text) for text in ids or ()))
    if not named and kind is None:
        raise InvalidInput("name the jobs (--id, one or more) or a kind (--kind): replaying every failed job needs one")
    if error_like is not None and not error_like:
        raise InvalidInput("--error-like must not be empty")
    which = ReplayFilter(
        ids=named,
        kind=kind,
        error_like=error_like,
        since=_ago(since, "--since") if since is not None else None,
        include_cancelled=include_cancelled,
    )
    with open_cli_store(ctx) as store:
        replayed = store.replay(which, by=f"cli:{_cli_user()}", dry_run=dry_run)
    if dry_run:
        for job_id in replayed:
            print(job_id)
        print(f"jobq: would replay {_jobs(len(replayed))}; nothing was changed (dry run)", file=sys.stderr)
    else:
        print(f"replayed {_jobs(len(replayed))}")
    missed = [str(job_id) for job_id in named if job_id not in set(replayed)]
    if missed:
        fail(f"{len(missed)} of {len(named)} ids not replayed (no such job, not failed or cancelled, or filtered out): "
             + ", ".join(missed), EXIT_FAILED)  # fmt: skip


@app.command("alert-check")
def alert_check(
    ctx: typer.Context,
    max_failure_ratio: Annotated[
        float, typer.Option(metavar="R", help="Alert when failed / (succeeded + failed) of a kind is over R (0..1).")
    ],
    min_jobs: Annotated[
        int, typer.Option(min=1, metavar="N", help="Judge only kinds with at least N finished jobs in the window.")
    ] = 10,
    window: Annotated[str, typer.Option(metavar="DURATION", help="The window: jobs that finished this recently.")] = "1h",
    kind: Annotated[str | None, typer.Option(metavar="K", help="Judge only this kind.")] = None,
) -> None:
    """Exit 1 when a kind's failure ratio is over R, else 0; one line why (cron).

    Rates, not counts: each kind that finished at least --min-jobs jobs in
    the window is judged on its own, so a busy healthy kind cannot hide a
    broken one.
    """
    if not 0 <= max_failure_ratio <= 1:
        raise InvalidInput(f"--max-failure-ratio must be from 0 to 1, not {max_failure_ratio}")
    seconds = parse_duration(window, name="--window")
    with open_cli_store(ctx) as store:
        outcomes = store.outcomes(seconds, kind)
    judged = [o for o in outcomes if o.succeeded + o.failed >= min_jobs]
    over = sorted((o for o in judged if o.failure_ratio > max_failure_ratio), key=lambda o: -o.failure_ratio)
    if over:
        worst = over[0]
        others = f"; {len(over) - 1} more kind(s) over it" if len(over) > 1 else ""
        print(f"ALERT: {worst.kind} failed {worst.failed} of {worst.succeeded + worst.failed} jobs in the last "
              f"{window} (ratio {worst.failure_ratio:.2f} > {max_failure_ratio:g}){others}")  # fmt: skip
        raise typer.Exit(EXIT_FAILED)
    if judged:
        top = max(judged, key=lambda o: o.failure_ratio)
        print(f"OK: highest failure ratio {top.failure_ratio:.2f} ({top.kind}, {top.failed} of "
              f"{top.succeeded + top.failed}) in the last {window}, at most {max_failure_ratio:g}")  # fmt: skip
    else:
        finished = sum(o.succeeded + o.failed for o in outcomes)
        print(f"OK: no kind finished {min_jobs} or more jobs in the last {window} ({finished} in all); nothing to judge")


@app.command()
def stats(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Queues, the last hour per kind, and live workers, as a table.

    Per queue: queued, running, how long the oldest due job has waited, and
    the live workers serving it; per kind: the last hour's successes,
    failures and failure ratio; the workers alive.
    """
    from service.metrics import WINDOW_SECONDS, WORKER_ALIVE_SECONDS

    with open_cli_store(ctx) as store:
        queues = store.queue_stats()
        outcomes = store.outcomes(WINDOW_SECONDS)
        workers = store.list_workers(WORKER_ALIVE_SECONDS)
    by_queue = {q.queue: q for q in queues}
    names = sorted(set(by_queue) | {name for w in workers for name in w.queues})
    per_queue = [
        (name, by_queue.get(name) or QueueStats(name, 0, 0, None), sum(1 for w in workers if name in w.queues))
        for name in names
    ]
    if as_json:
        queue_fields = [{**dataclasses.asdict(q), "workers": n} for _, q, n in per_queue]
        kind_fields = [{**dataclasses.asdict(o), "failure_ratio": round(o.failure_ratio, 4)} for o in outcomes]
        report = {"queues": queue_fields, "kinds": kind_fields, "window_seconds": WINDOW_SECONDS,
                  "workers_alive": len(workers)}  # fmt: skip
        print(json.dumps(report, indent=2))
        return
    queue_rows = [[name, q.queued, q.running, _age(q.oldest_queued_age_seconds), n] for name, q, n in per_queue]
    kind_rows = [[o.kind, o.succeeded, o.failed, f"{o.failure_ratio:.2f}"] for o in outcomes]
    print(_table(["QUEUE", "QUEUED", "RUNNING", "OLDEST DUE", "WORKERS"], queue_rows,
                 right=("QUEUED", "RUNNING", "OLDEST DUE", "WORKERS"), empty="(no queued or running jobs)"))
    print()
    print(_table(["KIND", "SUCCEEDED 1H", "FAILED 1H", "FAILURE RATIO"], kind_rows,
                 right=("SUCCEEDED 1H", "FAILED 1H", "FAILURE RATIO"), empty="(no job finished in the last hour)"))
    print()
    print(f"workers alive: {len(workers)}")


@app.command()
def prune(
    ctx: typer.Context,
    older_than: Annotated[
        str,
        typer.Option(metavar="DURATION", help="Delete terminal jobs that finished longer ago than this; "
                     "42d (six weeks) is the recommended retention."),
    ],
    dry_run: Annotated[bool, typer.Option(help="Count what would be deleted; delete nothing.")] = False,
    force: Annotated[bool, typer.Option(help="Allow --older-than under a day (42m is rarely meant for 42d).")] = False,
) -> None:
    """Delete old finished jobs with their attempts, results and replays.

    Succeeded, failed and cancelled jobs only, in small batches with short
    locks: safe while workers and the API run; queued and running jobs are
    never touched. From cron: jobq prune --older-than 42d
    """
    from service.maintenance.pruner import Pruner

    seconds = parse_duration(older_than, name="--older-than")
    if seconds < 86_400 and not force:
        raise InvalidInput(f"--older-than {older_than} keeps less than a day of history; add --force if you mean it")
    with open_cli_store(ctx) as store:
        if dry_run:
            count = store.count_prunable(seconds)
            print(f"would delete {_jobs(count)} finished more than {older_than} ago (dry run; nothing was deleted)")
            return
        deleted = Pruner(store, seconds).run_until_done()
    print(f"deleted {_jobs(deleted)} finished more than {older_than} ago")


def _ago(text: str, option: str) -> datetime:
    """The instant ``text`` (a duration) before now."""
    return datetime.now(UTC) - timedelta(seconds=parse_duration(text, name=option))


def _cli_user() -> str:
    """Who runs the command, for the replay record."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (some containers)
        return f"uid-{os.getuid()}"


def _age(seconds: float | None) -> str:
    return format_duration(seconds) if seconds is not None else "-"


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"


def _failure_fields(group: FailureGroup) -> dict[str, Any]:
    return {
        "kind": group.kind,
        "error_group": group.error_group,
        "count": group.count,
        "first_seen": _iso(group.first_seen),
        "last_seen": _iso(group.last_seen),
        "example_job_id": str(group.example_job_id),
    }


def _table(headers: list[str], rows: list[list[Any]], *, right: tuple[str, ...] = (), empty: str = "") -> str:
    """Columns padded to their widest cell, numbers right-aligned."""
    if not rows:
        return empty
    cells = [headers, *[[str(cell) for cell in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(width) if header in right else cell.ljust(width)
            for cell, width, header in zip(row, widths, headers, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


# -- the REST API: serve, dev, tokens (service.api) --------------------------------------


@app.command()
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0 in a container).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
    log_level: Annotated[str, typer.Option(metavar="LEVEL", help="uvicorn's log level.")] = "info",
) -> None:
    """Run the REST API under uvicorn (OpenAPI at /openapi.json, docs at /docs)."""
    import uvicorn

    from service.api import create_app

    uvicorn.run(create_app(cli_state(ctx).settings()), host=host, port=port, log_level=log_level)


@app.command()
def dev(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
) -> None:
    """Try jobq in one command: the API (auth off) and a worker running the example handlers.

    Migrates the database first (SQLite ./jobq.db unless JOBQ_DATABASE_URL says otherwise),
    prints the URL and a curl line to paste; Ctrl-C stops both cleanly.
    """
    import uvicorn

    from service.api import create_app
    from service.store import migrate as migrations

    settings = cli_state(ctx).settings().model_copy(update={"auth": False})
    with _migration_errors():
        migrations.upgrade(settings.database_url)
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host=host, port=port, log_level="warning"))
    worker = _start_dev_worker(settings.database_url)
    threading.Thread(target=_dev_announce, args=(server, worker, settings), daemon=True).start()
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)  # uvicorn re-raises it when done
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        _stop_dev_worker(worker)
    print("jobq dev: stopped", file=sys.stderr)


def _start_dev_worker(database_url: str) -> subprocess.Popen[bytes]:
    # Its own session: Ctrl-C reaches only `jobq dev`, which then stops the worker gracefully.
    env = {**os.environ, "JOBQ_DATABASE_URL": database_url}
    command = [sys.executable, "-m", "service", "worker", "--app", "service.examples", "--poll-seconds", "0.5"]
    return subprocess.Popen(command, env=env, start_new_session=True)


def _dev_announce(server: Any, worker: subprocess.Popen[bytes], settings: Settings) -> None:
    while not server.started and not server.should_exit:
        time.sleep(0.05)
    if not server.started:
        return
    config = server.config
    url = f"http://{config.host}:{config.port}"
    example = json.dumps({"kind": "classify", "payload": {"items": ["great product", "arrived broken"]}})
    print(
        f"jobq dev: the API is at {url} (docs: {url}/docs); a worker runs service.examples;\n"
        f"  database {_redact(settings.database_url)}; auth is off (tenant 'default').\n"
        f"Submit a job:\n\n"
        f"  curl -si -X POST {url}/v1/jobs -H 'Content-Type: application/json' -d '{example}'\n\n"
        f"then GET the URL in its Location header. Ctrl-C stops everything.",
        flush=True,
    )
    code = worker.wait()
    if not server.should_exit:
        print(f"jobq dev: the worker exited (code {code}); stopping", file=sys.stderr)
        server.should_exit = True


def _stop_dev_worker(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is not None:
        return
    worker.send_signal(signal.SIGTERM)  # finish or hand back its jobs, then exit
    try:
        worker.wait(timeout=40)
    except (KeyboardInterrupt, subprocess.TimeoutExpired):
        worker.kill()  # a second Ctrl-C, or a worker that would not stop
        worker.wait()


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


token_app = typer.Typer(help="API tokens: create (shown once), revoke, list.", no_args_is_help=True)
app.add_typer(token_app, name="token")


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    tenant: Annotated[str, typer.Option(metavar="NAME", help="The tenant whose jobs the token may see.")],
    name: Annotated[str | None, typer.Option(metavar="TEXT", help="A note: who or what uses it.")] = None,
) -> None:
    """Create an API token and print it once on stdout; only its SHA-256 is stored."""
    from service.api.auth import hash_token, new_token

    if not tenant.strip() or len(tenant) > 200:
        raise InvalidInput("--tenant must be a non-empty name of at most 200 characters")
    token = new_token()
    with open_cli_store(ctx) as store:
        record = store.create_token(tenant, hash_token(token), name)
    print(token)
    print(
        f"token {record.id} for tenant {tenant!r}: keep it now, it is not shown again "
        f"(revoke: jobq token revoke {record.id})",
        file=sys.stderr,
    )


@token_app.command("revoke")
def token_revoke(
    ctx: typer.Context,
    token_id: Annotated[str, typer.Argument(metavar="TOKEN_ID", help="The id `jobq token create` printed.")],
) -> None:
    """Revoke a token: from now on it gets 401, like any unknown token."""
    try:
        parsed = uuid.UUID(token_id)
    except ValueError:
        raise InvalidInput(f"not a token id (expected a UUID): {token_id!r}") from None
    with open_cli_store(ctx) as store:
        record = store.revoke_token(parsed)
    print(f"revoked token {record.id} of tenant {record.tenant!r}", file=sys.stderr)


@token_app.command("list")
def token_list(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(metavar="NAME", help="Only this tenant's tokens.")] = None,
) -> None:
    """List tokens (never the tokens themselves): id, tenant, name, created, revoked."""
    with open_cli_store(ctx) as store:
        records = store.list_tokens(tenant)
    for record in records:
        revoked = _iso(record.revoked_at) or "-"
        print(f"{record.id}  {record.tenant}  {record.name or '-'}  created {_iso(record.created_at)}  revoked {revoked}")


# -- entry point ---------------------------------------------------------------------


@contextmanager
def _migration_errors() -> Iterator[None]:
    """Alembic talks to the database through SQLAlchemy, outside the store's
    translation; a connection failure there is the store being unavailable."""
    import sqlalchemy.exc

    try:
        yield
    except sqlalchemy.exc.OperationalError as exc:
        message = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
        raise StoreUnavailable(f"database unavailable: {message[0] if message else type(exc).__name__}") from exc


def _redact(url: str) -> str:
    """The URL without its password, for messages."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    credentials, _, host = rest.partition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}@{host}" if ":" in credentials else url


# click's exception classes, from whichever click typer runs on (typer >= 0.2x vendors its own).
_click_exceptions = importlib.import_module(typer.BadParameter.__module__)


def main(argv: list[str] | None = None) -> None:
    """The ``jobq`` console script. Exits with the codes in the module docstring."""
    args = sys.argv[1:] if argv is None else list(argv)
    # The pool logs a warning per failed connection attempt; the one-line error says it once.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args or ["--help"], prog_name="jobq", standalone_mode=False)
    except _click_exceptions.ClickException as exc:
        fail(exc.format_message(), exc.exit_code)
    except typer.Abort:
        fail("aborted", EXIT_FAILED)
    except JobqError as exc:
        fail(str(exc), exit_code(exc))
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (`jobq status … | head -1`): nothing more to say
        raise SystemExit(EXIT_FAILED) from None
    if not args:
        raise SystemExit(EXIT_USAGE)  # the help was shown; no command was run
    raise SystemExit(result if isinstance(result, int) else EXIT_OK)
