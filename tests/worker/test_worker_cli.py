"""``jobq worker``: its help, its errors, and a run on SQLite (polling only)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import typer

from service.cli import app as cli_app
from service.jobs import NewJob
from service.store import Store
from tests.worker.harness import ROOT, WorkerProcess, wait_until

OPTIONS = ["--app", "--queues", "--concurrency", "--lease-seconds", "--grace-seconds", "--poll-seconds", "--log-level"]


def jobq(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "service", *args], capture_output=True, text=True, env=env,
                          timeout=60, cwd=ROOT)


def test_help_documents_every_option() -> None:
    command = typer.main.get_command(cli_app).commands["worker"]  # type: ignore[attr-defined]
    options = [p for p in command.params if p.name != "help"]
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


def test_a_worker_process_on_sqlite(sqlite_url: str, make_store: Callable[..., Store], tmp_path: Path) -> None:
    store = make_store(sqlite_url)
    jobs = store.enqueue_many([
        NewJob(kind="sleep", payload={"seconds": 0.2}),
        NewJob(kind="classify", payload={"items": ["a", "b", "c"], "delay": 0}),
        NewJob(kind="fail", payload={"permanent": True, "message": "no such image"}),
    ])
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
