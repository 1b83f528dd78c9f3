"""The long-running processes: the worker, the REST API (serve) and the one-command trial (dev)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from typing import Annotated, Any

import typer

from service.cli.app import (
    app,
    cli_state,
    redact,
)
from service.config import Settings
from service.durations import parse_duration
from service.errors import InvalidInput
from service.payloads import MAX_LEASE_SECONDS
from service.store import open_store


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
        typer.Option(
            metavar="Q1,Q2", help="Comma-separated queues to claim from (default: the queues the app's handlers name)."
        ),
    ] = None,
    concurrency: Annotated[
        int,
        typer.Option(
            min=1, max=1000, metavar="N", help="Jobs run at once, one thread each; claims only for free slots."
        ),
    ] = 4,
    lease_seconds: Annotated[
        float | None,
        typer.Option(
            min=0.1,
            max=MAX_LEASE_SECONDS,
            metavar="S",
            help="Lease per job, renewed by heartbeats every S/3; a dead worker's jobs come back after about S. "
            "(default: JOBQ_LEASE_SECONDS, 60)",
        ),
    ] = None,
    grace_seconds: Annotated[
        float,
        typer.Option(
            min=0,
            metavar="G",
            help="On SIGTERM/SIGINT: stop claiming, let running jobs finish for G seconds, then hand them back "
            "to the queue and exit 0. A second signal exits at once. Also how long a job told to stop "
            "(cancelled, timed out) may take to return.",
        ),
    ] = 30.0,
    poll_seconds: Annotated[
        float,
        typer.Option(
            min=0.05,
            metavar="P",
            help="Claim at least every P seconds (+-50% jitter) even without a "
            "LISTEN/NOTIFY wake-up, while claims find work; SQLite relies on polling alone.",
        ),
    ] = 2.0,
    max_poll_seconds: Annotated[
        float,
        typer.Option(
            min=0.05,
            metavar="M",
            help="An idle worker's polls back off to one every M seconds at most (full jitter: "
            "a wait uniform in 0..M), each one indexed probe instead of a claim; the first "
            "claim that finds work makes it poll every P again.",
        ),
    ] = 5.0,
    retention: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="Delete terminal jobs that finished longer ago than this (at least 1d; 42d is the "
            "recommended retention), 50 at a time every ~5 s as they expire, and the daily rollup's "
            "days past 400d: retention without a cron job, and without the burst that costs claims "
            "while `jobq prune` runs. Every worker may have it. (default: keep everything)",
            show_default=False,
        ),
    ] = None,
    retention_every: Annotated[
        float | None, typer.Option(min=0.01, hidden=True, help="Seconds between retention turns (tests).")
    ] = None,
    leader_lease_seconds: Annotated[
        float | None,
        typer.Option(
            min=0.5,
            metavar="SECONDS",
            help="The maintenance leadership's lease: one worker of the fleet at a time reaps, fires "
            "schedules, folds the rollup and prunes; when it dies or is cut off, another takes over "
            "within this (plus a tenth). Give every worker of a fleet the same. (default: 15)",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[
        str, typer.Option(metavar="LEVEL", help="debug, info, warning or error. Logs are JSON lines on stderr.")
    ] = "info",
    wait_for_database: Annotated[
        float | None,
        typer.Option(
            min=0,
            metavar="SECONDS",
            help="At start, wait at most this long for the database to answer with its schema migrated, "
            "then exit 3 (default: wait for ever, saying what is wrong every 30 s).",
            show_default=False,
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            metavar="PORT",
            help="Serve this worker's own Prometheus metrics on http://HOST:PORT/metrics (jobs started and "
            "finished by outcome, run times, heartbeats, leadership, whether the database answers). "
            "(default: off)",
            show_default=False,
        ),
    ] = None,
    metrics_host: Annotated[
        str, typer.Option(metavar="HOST", help="Address the --metrics-port server listens on.")
    ] = "0.0.0.0",  # noqa: S104  # a container's port; the NetworkPolicy says who reaches it
    show_traceback: Annotated[
        bool, typer.Option("--traceback", help="If importing --app fails, print the whole traceback.")
    ] = False,
    report_seconds: Annotated[
        float, typer.Option(min=0.1, hidden=True, help="How often the start-up wait says why (tests).")
    ] = 30.0,
) -> None:
    """Run jobs of the app's kinds until SIGTERM/SIGINT (see `Workers` in the README).

    Uses at most JOBQ_POOL_SIZE + 1 database connections (3 by default), whatever --concurrency is.
    """
    import os
    import traceback

    from service.maintenance.duties import RETENTION_EVERY
    from service.maintenance.leadership import LEASE_SECONDS as LEADER_LEASE_SECONDS
    from service.maintenance.pruner import check_retention
    from service.retry import RetryPolicy
    from service.worker import Worker, WorkerConfig, load_app
    from service.worker.logs import configure_logging
    from service.worker.registry import AppImportFailed
    from service.worker.startup import wait_for_database as wait_until_ready

    if log_level.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise InvalidInput(f"--log-level must be debug, info, warning or error, not {log_level!r}")
    retention_seconds = parse_duration(retention, name="--retention") if retention is not None else None
    if retention_seconds is not None:  # the Worker's Pruner checks it too, but only once the store answers
        check_retention(retention_seconds, name=f"--retention {retention}", remedy="give at least 1d")
    settings = cli_state(ctx).settings()
    config = WorkerConfig(
        queues=tuple(q.strip() for q in queues.split(",")) if queues else None,
        concurrency=concurrency,
        lease_seconds=lease_seconds if lease_seconds is not None else settings.lease_seconds,
        grace_seconds=grace_seconds,
        poll_seconds=poll_seconds,
        max_poll_seconds=max_poll_seconds,
        listen=settings.notify,
        retention_seconds=retention_seconds,
        retention_every=retention_every if retention_every is not None else RETENTION_EVERY,
        leader_lease_seconds=leader_lease_seconds if leader_lease_seconds is not None else LEADER_LEASE_SECONDS,
    )
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # `--app myhandlers` finds ./myhandlers.py, as uvicorn does
    try:
        handlers = load_app(app_ref)
    except AppImportFailed as exc:
        if show_traceback and exc.__cause__ is not None:
            traceback.print_exception(exc.__cause__, file=sys.stderr)
        raise
    configure_logging(log_level)
    try:
        store = wait_until_ready(
            partial(open_store, settings),
            settings.database_url,
            wait_seconds=wait_for_database,
            report_seconds=report_seconds,
        )
    except KeyboardInterrupt:  # Ctrl-C while waiting: nothing was started
        return
    finally:
        for handler in logging.getLogger().handlers:
            handler.flush()  # the JSON lines before an error line
    if store is None:
        return
    try:
        policy = RetryPolicy(settings.retry_base_seconds, settings.retry_cap_seconds)
        worker = Worker(store, handlers, config, retry_policy=policy)
        if metrics_port is not None:
            _serve_worker_metrics(worker, metrics_host, metrics_port)
        worker.run()
    finally:
        store.close()


def _serve_worker_metrics(worker: Any, host: str, port: int) -> None:
    from service.worker.metrics import start_worker_metrics

    try:
        start_worker_metrics(worker, port, host)
    except OSError as exc:  # the port is taken, or the address is not this host's
        raise InvalidInput(f"--metrics-port {port}: cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


# -- operations: failures, replay, alerts, stats, retention (README: Operations) ---------------


@app.command()
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0 in a container).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
    log_level: Annotated[str, typer.Option(metavar="LEVEL", help="uvicorn's log level.")] = "info",
    log_format: Annotated[
        str,
        typer.Option(
            metavar="FORMAT",
            help="json: one JSON object per line on stderr, access lines included, as workers write; "
            "text: uvicorn's own lines, for a human at a terminal.",
        ),
    ] = "json",
) -> None:
    """Run the REST API under uvicorn (OpenAPI at /openapi.json, docs at /docs)."""
    import uvicorn

    from service.app import create_app

    app = create_app(cli_state(ctx).settings())
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        log_config=_uvicorn_log_config(log_format, log_level),
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
    )
    _stopping_server(config, app).run()


SHUTDOWN_GRACE_SECONDS = 8
"""How long the API waits for requests in flight once told to stop, before it closes them. With
long polls answered at once (service.web.Stopping) a request in flight is one store call; the
bound keeps the whole stop (this, then closing the listener and the pool) under compose's 15 s
stop_grace_period and Kubernetes' 30 s terminationGracePeriodSeconds (minus the 5 s preStop)."""


def _stopping_server(config: Any, app: Any) -> Any:
    """uvicorn's server, which on SIGTERM/SIGINT first tells the app (long polls answer at once)."""
    import uvicorn

    class StoppingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.stopping.begin()
            super().handle_exit(sig, frame)

    return StoppingServer(config)


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

    from service.app import create_app
    from service.store import migrate as migrations

    settings = cli_state(ctx).settings().model_copy(update={"auth": False})
    migrations.upgrade(settings.database_url)
    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_level="warning",
        log_config=_uvicorn_log_config("json", "warning"),
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
    )
    server = _stopping_server(config, config.app)
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


def _uvicorn_log_config(log_format: str, level: str) -> dict[str, Any]:
    import uvicorn.config

    from service.logs import LOG_FORMATS, uvicorn_log_config

    if log_format not in LOG_FORMATS:
        raise InvalidInput(f"--log-format must be json or text, not {log_format!r}")
    return uvicorn_log_config(log_format, level) or uvicorn.config.LOGGING_CONFIG


def _start_dev_worker(database_url: str) -> subprocess.Popen[bytes]:
    # Its own session: Ctrl-C reaches only `jobq dev`, which then stops the worker gracefully.
    env = {**os.environ, "JOBQ_DATABASE_URL": database_url}
    # Polls every 0.5 s even when idle: a trial's first job is picked up at once.
    polls = ["--poll-seconds", "0.5", "--max-poll-seconds", "0.5"]
    command = [sys.executable, "-m", "service", "worker", "--app", "service.examples", *polls]
    parent = os.getpid()
    return subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=lambda: _die_with(parent))


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with(parent: int) -> None:
    """In the child, before exec: SIGTERM it when ``jobq dev`` dies, however it dies (a SIGKILL too,
    which runs none of the parent's clean-up), so no worker outlives its dev session. Linux only;
    the signal comes when the thread that started the child ends, here the main thread."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


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
        f"  database {redact(settings.database_url)}; auth is off (tenant 'default').\n"
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
