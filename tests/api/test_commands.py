"""The API's commands, run as real processes: `jobq token …`, `jobq serve`, `jobq dev`."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import httpx
import pytest

from service.cli import main
from service.tokens import hash_token
from tests.api.conftest import REPO, LiveApi, free_port

pytestmark = pytest.mark.slow


def jobq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`jobq ARGS` in this process (a subprocess per call costs seconds on a busy machine)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        mock.patch.dict(os.environ, env or {}),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
        pytest.raises(SystemExit) as exited,
    ):
        main(list(args))
    code = exited.value.code if isinstance(exited.value.code, int) else 1
    return subprocess.CompletedProcess(["jobq", *args], code, stdout.getvalue(), stderr.getvalue())


def test_token_create_prints_it_once_and_revoke_makes_it_a_401(api: LiveApi, store_url: str) -> None:
    env = {"JOBQ_DATABASE_URL": store_url}
    created = jobq("token", "create", "--tenant", "acme", "--name", "ci", env=env)
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert re.fullmatch(r"jobq_[A-Za-z0-9_-]{43}", token), created.stdout
    token_id = re.search(r"token ([0-9a-f-]{36})", created.stderr)
    assert token_id, created.stderr

    http = api.http(token)
    assert http.get("/v1/jobs").status_code == 200

    listed = jobq("token", "list", "--tenant", "acme", env=env)
    assert token_id.group(1) in listed.stdout and token not in listed.stdout

    revoked = jobq("token", "revoke", token_id.group(1), env=env)
    assert revoked.returncode == 0, revoked.stderr
    assert http.get("/v1/jobs").status_code == 401

    unknown = jobq("token", "revoke", str(uuid.uuid4()), env=env)
    assert unknown.returncode == 1 and "not found" in unknown.stderr
    bad = jobq("token", "revoke", "nope", env=env)
    assert bad.returncode == 2 and bad.stderr.startswith("error: not a token id")
    assert jobq("token", "create", "--tenant", " ", env=env).returncode == 2


def test_token_create_admin_makes_an_operators_token_that_v1_refuses(api: LiveApi, store_url: str) -> None:
    env = {"JOBQ_DATABASE_URL": store_url}
    created = jobq("token", "create", "--admin", "--name", "alice", env=env)
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert re.fullmatch(r"jobq_[A-Za-z0-9_-]{43}", token) and "admin" in created.stderr
    assert api.store.admin_token(hash_token(token)) is not None  # stored hashed, like the others
    assert api.http(token).get("/v1/jobs").status_code == 401  # an operator's token is no tenant's
    listed = jobq("token", "list", env=env)
    assert "* (admin)  alice" in listed.stdout and token not in listed.stdout

    for both_or_neither in (["--admin", "--tenant", "acme"], []):
        refused = jobq("token", "create", *both_or_neither, env=env)
        assert refused.returncode == 2 and refused.stderr.startswith("error: give either --tenant"), refused.stderr
    assert jobq("token", "create", "--tenant", "*", env=env).returncode == 2

    viewer = jobq("token", "create", "--admin", "--read-only", "--name", "bob", env=env)
    assert viewer.returncode == 0 and "read-only" in viewer.stderr, viewer.stderr
    record = api.store.admin_token(hash_token(viewer.stdout.strip()))
    assert record is not None and record.read_only
    assert "* (admin, read-only)  bob" in jobq("token", "list", env=env).stdout
    assert jobq("token", "create", "--tenant", "acme", "--read-only", env=env).returncode == 2


def _wait_for(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"{url} never answered"
        time.sleep(0.1)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate()  # reaps it and closes its pipes


def test_serve_runs_the_api_until_sigterm_logging_json_lines(
    sqlite_url: str, processes: list[subprocess.Popen[str]]
) -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--port", str(port)],
        env={**os.environ, "JOBQ_DATABASE_URL": sqlite_url},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    processes.append(process)
    _wait_for(f"http://127.0.0.1:{port}/readyz")
    assert httpx.get(f"http://127.0.0.1:{port}/v1/jobs").status_code == 401  # auth is on by default
    process.send_signal(signal.SIGTERM)
    # uvicorn shuts down gracefully, then re-raises SIGTERM: the conventional exit of a signalled server.
    assert process.wait(timeout=30) in (0, -signal.SIGTERM)
    assert process.stderr is not None
    lines = [json.loads(line) for line in process.stderr.read().splitlines()]  # every line is JSON
    assert {"ts", "level", "logger", "event"} <= set(lines[0])
    assert any(line["event"].startswith("Finished server process") for line in lines), lines
    access = [line for line in lines if line["event"] == "http.request" and line["path"] == "/v1/jobs"]
    assert [(a["logger"], a["method"], a["status"]) for a in access] == [("uvicorn.access", "GET", 401)], lines


def test_serve_refuses_an_unknown_log_format() -> None:
    refused = jobq("serve", "--log-format", "xml")
    assert refused.returncode == 2 and "--log-format must be json or text" in refused.stderr


def _dev_banner(process: subprocess.Popen[str]) -> list[str]:
    """Lines of `jobq dev`'s stdout up to its Ctrl-C hint (it prints that once it is ready)."""
    assert process.stdout is not None
    banner = []
    deadline = time.monotonic() + 90
    while not any("Ctrl-C" in line for line in banner):
        line = process.stdout.readline()
        assert line or process.poll() is None, f"jobq dev died: {process.stderr.read() if process.stderr else ''}"
        banner.append(line)
        assert time.monotonic() < deadline
    return banner


def _start_dev(tmp_path: Path, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBQ_")}  # the defaults, as on a fresh clone
    env["PYTHONPATH"] = str(REPO)
    return subprocess.Popen(
        [sys.executable, "-m", "service", "dev", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_dev_killed_with_sigkill_takes_its_worker_with_it(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    process = _start_dev(tmp_path, free_port())
    processes.append(process)
    _dev_banner(process)
    workers = _children(process.pid)
    assert workers, "jobq dev runs its worker as a child process"
    process.kill()  # SIGKILL: none of jobq dev's own clean-up runs
    process.wait(timeout=10)
    deadline = time.monotonic() + 30
    try:
        while alive := [pid for pid in workers if _running(pid)]:
            assert time.monotonic() < deadline, f"the worker outlived jobq dev: {alive}"
            time.sleep(0.1)
    finally:
        for pid in workers:  # an orphan would hold the test's pipes open
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_dev_runs_api_and_worker_prints_a_curl_that_works_and_stops_on_ctrl_c(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    port = free_port()
    process = _start_dev(tmp_path, port)
    processes.append(process)
    banner = _dev_banner(process)
    text = "".join(banner)
    assert f"http://127.0.0.1:{port}" in text
    assert (tmp_path / "jobq.db").exists()  # the SQLite default, migrated

    curl_line = next(line.strip() for line in banner if line.strip().startswith("curl "))
    answer = subprocess.run(shlex.split(curl_line), check=False, capture_output=True, text=True, timeout=30)
    assert answer.returncode == 0, answer.stderr
    assert "HTTP/1.1 202" in answer.stdout
    location = re.search(r"(?im)^location: (\S+)", answer.stdout)
    assert location, answer.stdout
    url = f"http://127.0.0.1:{port}{location.group(1)}"
    deadline = time.monotonic() + 60
    while (status := httpx.get(url).json())["state"] != "succeeded":
        assert status["state"] in ("queued", "running"), status
        assert time.monotonic() < deadline, status
        time.sleep(0.2)
    result = httpx.get(f"http://127.0.0.1:{port}{status['result_url']}").json()
    assert [entry["item"] for entry in result["result"]["results"]] == ["great product", "arrived broken"]

    workers = _children(process.pid)
    assert workers, "jobq dev runs its worker as a child process"
    process.send_signal(signal.SIGINT)  # Ctrl-C
    assert process.wait(timeout=60) == 0, process.stderr.read() if process.stderr else ""
    assert not any(_running(pid) for pid in workers)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
