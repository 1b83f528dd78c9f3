"""The dead-letter path, alerts, stats and retention (README: Operations)."""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from service.cli.app import (
    EXIT_FAILED,
    app,
    fail,
    iso,
    open_cli_store,
    parse_job_id,
)
from service.durations import format_duration, parse_duration
from service.errors import InvalidInput
from service.jobs import (
    WORKER_ALIVE_SECONDS,
    FailureGroup,
    QueueStats,
    ReplayFilter,
)
from service.store.base import PRUNE_BATCH, DatabaseHealth


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
        print(json.dumps({"since": iso(start), "groups": [_failure_fields(g) for g in groups]}, indent=2))
    elif groups:
        rows = [
            [g.count, g.kind, iso(g.last_seen), iso(g.first_seen), g.example_job_id, g.error_group or "-"]
            for g in groups
        ]
        print(_table(["COUNT", "KIND", "LAST SEEN", "FIRST SEEN", "EXAMPLE JOB", "ERROR"], rows, right=("COUNT",)))
    else:
        print(f"jobq: no failed jobs since {iso(start)}", file=sys.stderr)


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
    failed_items: Annotated[
        list[str] | None,
        typer.Option(
            "--failed-items",
            metavar="JOB_ID",
            help="Re-run only this job's failed items (a succeeded or failed job); repeat for more.",
        ),
    ] = None,
) -> None:
    """Put failed jobs back in the queue, attempts 0, recorded as yours (cli:USER).

    --failed-items JOB_ID re-runs only the job's failed items: their outcomes go, the
    ok ones stay, and the next attempt skips those.

    --id or --kind, or both: every option given narrows the others
    (POST /v1/jobs/replay takes the same filter). Prints how many; with
    --dry-run, the ids one per line. Named jobs that were not replayed
    (no such job, not failed or cancelled, or filtered out) exit 1.
    """
    if ids and failed_items:
        raise InvalidInput("give --id (replay whole jobs) or --failed-items (only their failed items), not both")
    named = tuple(dict.fromkeys(parse_job_id(text) for text in ids or failed_items or ()))
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
        failed_items=bool(failed_items),
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
        fail(f"{len(missed)} of {len(named)} ids not replayed "
             f"(no such job, not {_replayable(which)}, or filtered out): "
             + ", ".join(missed), EXIT_FAILED)  # fmt: skip


def _replayable(which: ReplayFilter) -> str:
    return "a finished job with failed items" if which.failed_items else "failed or cancelled"


@app.command("alert-check")
def alert_check(
    ctx: typer.Context,
    max_failure_ratio: Annotated[
        float, typer.Option(metavar="R", help="Alert when failed / (succeeded + failed) of a kind is over R (0..1).")
    ],
    min_jobs: Annotated[
        int, typer.Option(min=1, metavar="N", help="Judge only kinds with at least N finished jobs in the window.")
    ] = 10,
    window: Annotated[
        str, typer.Option(metavar="DURATION", help="The window: jobs that finished this recently.")
    ] = "1h",
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
        print(
            f"OK: no kind finished {min_jobs} or more jobs in the last {window} ({finished} in all); nothing to judge"
        )


@app.command()
def stats(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Queues, the last hour per kind, and live workers, as a table.

    Per queue: queued, running, how long the oldest due job has waited, and
    the live workers serving it; per kind: the last hour's successes,
    failures and failure ratio; the workers alive. On PostgreSQL, what holds
    back vacuum: the oldest open transaction on the database and who holds it,
    and the xmin a replication slot or a standby's feedback holds.
    """
    from service.metrics import WINDOW_SECONDS

    with open_cli_store(ctx) as store:
        queues = store.queue_stats()
        outcomes = store.outcomes(WINDOW_SECONDS)
        workers = store.list_workers(WORKER_ALIVE_SECONDS)
        leader = store.current_leader()
        health = store.health_stats()
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
                  "workers_alive": len(workers),
                  "leader": {"owner": leader.owner, "term": leader.term} if leader else None,
                  "database": _database_fields(health)}  # fmt: skip
        print(json.dumps(report, indent=2))
        return
    queue_rows = [[name, q.queued, q.running, _age(q.oldest_queued_age_seconds), n] for name, q, n in per_queue]
    kind_rows = [[o.kind, o.succeeded, o.failed, f"{o.failure_ratio:.2f}"] for o in outcomes]
    print(
        _table(
            ["QUEUE", "QUEUED", "RUNNING", "OLDEST DUE", "WORKERS"],
            queue_rows,
            right=("QUEUED", "RUNNING", "OLDEST DUE", "WORKERS"),
            empty="(no queued or running jobs)",
        )
    )
    print()
    print(
        _table(
            ["KIND", "SUCCEEDED 1H", "FAILED 1H", "FAILURE RATIO"],
            kind_rows,
            right=("SUCCEEDED 1H", "FAILED 1H", "FAILURE RATIO"),
            empty="(no job finished in the last hour)",
        )
    )
    print()
    if health.oldest_transaction_age_seconds is not None:  # PostgreSQL only: SQLite has no such registry
        print(f"oldest open transaction: {_open_transaction(health)}")
        print(f"replication holds back vacuum by: {health.replication_xmin_age} transactions")
    print(f"maintenance leader: {leader.owner} (term {leader.term})" if leader else "maintenance leader: none")
    print(f"workers alive: {len(workers)}")


def _open_transaction(health: DatabaseHealth) -> str:
    holder = health.oldest_transaction
    if holder is None:
        return "none"
    app = f" ({holder.application_name})" if holder.application_name else ""
    who = (
        f"a prepared transaction of {holder.usename}"
        if holder.pid is None
        else f"pid {holder.pid} {holder.usename}{app}, {holder.state}"
    )
    xmin = f", xmin age {holder.xmin_age}" if holder.xmin_age is not None else ", holds no snapshot"
    return f"{_age(health.oldest_transaction_age_seconds)}, {who}{xmin}"


def _database_fields(health: DatabaseHealth) -> dict[str, Any] | None:
    """What holds back vacuum, for --json (None on SQLite, which measures none of it)."""
    if health.oldest_transaction_age_seconds is None:
        return None
    holder = health.oldest_transaction
    return {
        "oldest_transaction_age_seconds": round(health.oldest_transaction_age_seconds, 3),
        "oldest_transaction": dataclasses.asdict(holder) if holder is not None else None,
        "replication_xmin_age": health.replication_xmin_age,
    }


@app.command()
def prune(
    ctx: typer.Context,
    older_than: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help="Delete terminal jobs that finished longer ago than this; "
            "42d (six weeks) is the recommended retention.",
        ),
    ],
    dry_run: Annotated[bool, typer.Option(help="Count what would be deleted; delete nothing.")] = False,
    force: Annotated[bool, typer.Option(help="Allow --older-than under a day (42m is rarely meant for 42d).")] = False,
    pause: Annotated[
        float,
        typer.Option(metavar="SECONDS", min=0.0, max=60.0, help="Wait this long between batches."),
    ] = 0.0,
    batch: Annotated[
        int,
        typer.Option(
            metavar="JOBS",
            min=1,
            max=10_000,
            help="Jobs deleted per transaction: smaller batches write less WAL per commit, "
            "so the queue's own commits wait less behind them.",
        ),
    ] = PRUNE_BATCH,
    rollup_older_than: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help="Delete the daily rollup's days (the analysts' day-level views) that ended longer ago "
            "than this; at least --older-than.",
        ),
    ] = "400d",
) -> None:
    """Delete old finished jobs with their attempts, results and replays.

    Succeeded, failed and cancelled jobs only, in small batches with short
    locks: safe while workers and the API run; queued and running jobs are
    never touched. From cron: jobq prune --older-than 42d
    """
    from service.maintenance.pruner import Pruner, check_retention

    seconds = parse_duration(older_than, name="--older-than")
    check_retention(seconds, force=force, name=f"--older-than {older_than}", remedy="add --force if you mean it")
    rollup_seconds = parse_duration(rollup_older_than, name="--rollup-older-than")
    if rollup_seconds < seconds:
        raise InvalidInput(f"--rollup-older-than {rollup_older_than} is shorter than --older-than {older_than}")
    with open_cli_store(ctx) as store:
        if dry_run:
            count = store.count_prunable(seconds)
            print(f"would delete {_jobs(count)} finished more than {older_than} ago (dry run; nothing was deleted)")
            return
        pruner = Pruner(
            store, seconds, batch=batch, pause_seconds=pause, rollup_older_than_seconds=rollup_seconds, force=force
        )
        deleted = pruner.run_until_done()
        print(f"deleted {_jobs(deleted)} finished more than {older_than} ago")
        rows = pruner.prune_rollup()
        if rows:
            print(f"deleted {rows:,} rows of the daily rollup for days more than {rollup_older_than} ago")


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
        "first_seen": iso(group.first_seen),
        "last_seen": iso(group.last_seen),
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
