"""``jobq worker``: its help, its errors, and a run on SQLite (polling only)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import typer

from service.cli import app as cli_app
from service.jobs import NewJob
from service.store import Store
from tests.worker.harness import ROOT, WorkerProcess, wait_until

OPTIONS = [
    "--app",
    "--queues",
    "--concurrency",
    "--lease-seconds",
    "--grace-seconds",
    "--poll-seconds",
    "--max-poll-seconds",
    "--retention",
    "--leader-lease-seconds",
    "--log-level",
    "--wait-for-database",
    "--metrics-port",
    "--metrics-host",
    "--traceback",
]


def jobq(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "service", *args], capture_output=True, text=True, env=env, timeout=60, cwd=ROOT
    )


def test_help_documents_every_option() -> None:
    command = typer.main.get_command(cli_app).commands["worker"]  # type: ignore[attr-defined]
    options = [p for p in command.params if p.name != "help" and not getattr(p, "hidden", False)]
    assert sorted(o for p in options for o in p.opts) == sorted(OPTIONS)
    assert all(getattr(p, "help", None) for p in options), "every option needs a help text"
    shown = jobq("worker", "--help")
    assert shown.returncode == 0
    for option in OPTIONS:
        assert option in shown.stdout
    assert "connections" in shown.stdout


def test_a_bad_app_is_a_usage_error(sqlite_url: str) -> None:
    for reference, message in [
        ("no_such_module_anywhere", "no module named"),
        ("service.examples:nothing", "no attribute"),
    ]:
        result = jobq("--database-url", sqlite_url, "worker", "--app", reference)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("error: ") and message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_an_app_whose_import_raises_is_one_line_naming_the_exception_and_where(tmp_path: Path) -> None:
    (tmp_path / "broken_handlers.py").write_text("import os\n\nraise RuntimeError('JOBQ_MODEL_PATH is not set')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable,
        "-m",
        "service",
        "--database-url",
        "sqlite:///unused.db",
        "worker",
        "--app",
        "broken_handlers",
    ]
    plain = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path)
    assert plain.returncode == 2, plain.stderr
    assert plain.stderr.splitlines() == [
        f"error: --app broken_handlers: importing it raised RuntimeError: JOBQ_MODEL_PATH is not set at "
        f"{tmp_path / 'broken_handlers.py'}:3"
    ]
    verbose = subprocess.run(
        [*command, "--traceback"], capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path
    )
    assert verbose.returncode == 2
    assert verbose.stderr.startswith("Traceback") and 'broken_handlers.py", line 3' in verbose.stderr
    assert verbose.stderr.splitlines()[-1] == plain.stderr.strip()
    assert not (tmp_path / "unused.db").exists()  # nothing was opened


def test_a_worker_on_an_unmigrated_database_says_why_every_interval_then_gives_up_with_exit_3(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'never-migrated.db'}"
    worker = WorkerProcess(
        url, tmp_path, "waiting", ["--wait-for-database", "2", "--report-seconds", "0.4"], app="service.examples"
    )
    assert worker.wait(30) == 3, worker.log()
    waits = worker.events("worker.waiting_for_database")
    assert len(waits) >= 3, worker.log()  # at once, then every 0.4 s, for 2 s
    assert all("jobq migrate" in w["error"] and "run `jobq migrate`" in w["todo"] for w in waits), waits
    assert worker.events("worker.gave_up") and not worker.events("worker.started")
    last = worker.log().strip().splitlines()[-1]
    assert last.startswith("error: gave up after --wait-for-database 2 s: "), worker.log()
    assert not (tmp_path / "never-migrated.db").exists()  # waiting never creates the database


def test_a_worker_on_a_refused_postgresql_says_so_at_once_and_gives_up_on_time(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    worker = WorkerProcess(
        f"postgresql://jobq@127.0.0.1:{port}/jobq",
        tmp_path,
        "refused",
        ["--wait-for-database", "1"],
        app="service.examples",
    )
    started = time.monotonic()
    assert worker.wait(30) == 3, worker.log()
    assert time.monotonic() - started < 15  # not the store pool's timeout per try
    first = worker.events("worker.waiting_for_database")[0]
    assert "refused" in first["error"].lower() and "JOBQ_DATABASE_URL" in first["todo"], first


def test_a_worker_on_a_schema_behind_keeps_waiting_then_starts_once_migrated(tmp_path: Path) -> None:
    from service.store import migrate

    path = tmp_path / "behind.db"
    migrate.upgrade(f"sqlite:///{path}", "0005")  # migrations short of head
    worker = WorkerProcess(f"sqlite:///{path}", tmp_path, "behind", ["--report-seconds", "0.3"], app="service.examples")
    try:
        waits = wait_until(lambda: worker.events("worker.waiting_for_database")[1:], 20, what="two reports")
        assert all("behind" in w["error"] and "jobq migrate" in w["todo"] for w in waits), waits
        assert worker.alive() and not worker.events("worker.started")
        migrate.upgrade(f"sqlite:///{path}")
        worker.wait_started()
        assert worker.events("worker.database_ready")
    finally:
        worker.terminate()
        assert worker.wait(30) == 0


def test_a_worker_process_on_sqlite(sqlite_url: str, make_store: Callable[..., Store], tmp_path: Path) -> None:
    store = make_store(sqlite_url)
    jobs = store.enqueue_many(
        [
            NewJob(kind="sleep", payload={"seconds": 0.2}),
            NewJob(kind="classify", payload={"items": ["a", "b", "c"], "delay": 0}),
            NewJob(kind="fail", payload={"permanent": True, "message": "no such image"}),
        ]
    )
    worker = WorkerProcess(
        sqlite_url, tmp_path, "sqlite-worker", ["--poll-seconds", "0.2", "--lease-seconds", "5"], app="service.examples"
    )
    try:
        worker.wait_started()
        wait_until(lambda: all(store.get(j.id).state.terminal for j in jobs), 20, what="every job to end")
        assert [store.get(j.id).state.value for j in jobs] == ["succeeded", "succeeded", "failed"]
        assert [r["item"] for r in store.get_result(jobs[1].id)["results"]] == ["a", "b", "c"]
        assert store.get(jobs[2].id).error.startswith("PermanentError: no such image")
        events = {e["event"] for e in worker.events()}
        assert {"job.claimed", "job.succeeded", "job.failed"} <= events
        worker.terminate()
        assert worker.wait(10) == 0
        assert worker.events("worker.stopped")
    finally:
        if worker.alive():
            worker.kill()
