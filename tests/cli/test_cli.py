"""The real ``jobq`` command, run as a subprocess, on SQLite and on PostgreSQL.

Every test runs the installed console script (or ``python -m service`` where no
script is installed) with a clean ``JOBQ_*`` environment, and reads the database
directly (``Database`` from tests/conftest.py) to check what was, or was not,
written. The CLI's contract: results on stdout, one ``error: …`` line on stderr,
exit codes 0 ok, 1 refused (e.g. no such job), 2 usage or input, 3 database
unavailable or not migrated.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from service.jobs import NewJob
from service.store import Store
from tests.conftest import Database, FakeClock, PostgresServer, sqlite_url_for
from tests.store.builders import fail_job

JOBQ_SCRIPT = Path(sys.executable).with_name("jobq")  # the venv's console script, next to its python
JOBQ = [str(JOBQ_SCRIPT)] if JOBQ_SCRIPT.exists() else [sys.executable, "-m", "service"]

STATUS_FIELDS = [
    "job_id", "kind", "queue", "state", "done", "total", "items_ok", "items_failed", "attempts", "max_attempts", "error", "run_after",
    "stale", "cancel_requested", "parents_total", "parents_pending", "workflow_id", "created_at", "started_at", "finished_at",
    "updated_at",
]  # fmt: skip

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


Run = Callable[..., subprocess.CompletedProcess[str]]


def jobq(*args: str, url: str | None, cwd: Path, env: dict[str, str] | None = None, command: list[str] = JOBQ):
    """Run ``jobq args…`` with no stdin and only the JOBQ_* variables given here."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBQ_")}
    if url is not None:
        environ["JOBQ_DATABASE_URL"] = url
    environ.update(env or {})
    return subprocess.run(
        [*command, *args], cwd=cwd, env=environ, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int) -> None:
    context = f"exit {result.returncode}, stdout {result.stdout!r}, stderr {result.stderr!r}"
    assert result.returncode == code, context
    assert result.stdout == "", context
    assert "Traceback" not in result.stderr, context
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) > len("error: "), context


@pytest.fixture
def run(store_url: str, tmp_path: Path) -> Run:
    """``run(*args)``: jobq against this test's migrated database."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return jobq(*args, url=store_url, cwd=tmp_path, env=env)

    return run


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database that exists but was never migrated."""
    if request.param == "sqlite":
        path = tmp_path / "empty.db"
        sqlite3.connect(path).close()
        yield sqlite_url_for(path)
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    name = server.new_name("empty")
    url = server.create_database(name)
    yield url
    server.drop_database(name)


def enqueue(run: Run, *args: str) -> uuid.UUID:
    result = run("enqueue", *args)
    assert result.returncode == 0, result.stderr
    return uuid.UUID(result.stdout.strip())


# -- migrate ----------------------------------------------------------------------------------


def test_migrate_creates_the_schema_and_is_idempotent(empty_url: str, tmp_path: Path) -> None:
    for _ in range(2):
        result = jobq("migrate", url=empty_url, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout == ""
        assert len(result.stderr.splitlines()) == 1 and "newest migration" in result.stderr
    db = Database(empty_url)
    try:
        assert db.count("jobs") == 0
        assert db.count("job_attempts") == 0
        assert db.count("job_results") == 0
        assert db.count("alembic_version") == 1
    finally:
        db.close()


def test_migrate_does_not_print_the_password(tmp_path: Path) -> None:
    result = jobq("migrate", url="postgresql://someone:s3cret@127.0.0.1:1/x", cwd=tmp_path)
    assert_one_line_error(result, EXIT_UNAVAILABLE)
    assert "s3cret" not in result.stderr


def test_default_url_is_a_sqlite_file_in_the_working_directory(tmp_path: Path) -> None:
    assert jobq("migrate", url=None, cwd=tmp_path).returncode == 0
    assert (tmp_path / "jobq.db").exists()
    created = jobq("enqueue", "hello", url=None, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    shown = jobq("status", created.stdout.strip(), "--json", url=None, cwd=tmp_path)
    assert json.loads(shown.stdout)["kind"] == "hello"


def test_database_url_option_overrides_the_environment(store_url: str, db: Database, tmp_path: Path) -> None:
    result = jobq("--database-url", store_url, "enqueue", "hello", url="sqlite:////nonexistent/dir/x.db", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert db.count("jobs") == 1


# -- enqueue ------------------------------------------------------------------------------------


def test_enqueue_prints_only_the_new_id(run: Run, db: Database) -> None:
    result = run(
        "enqueue", "resize", "--payload", '{"image": "a.png", "sizes": [1, 2]}', "--queue", "media",
        "--priority", "7", "--max-attempts", "5", "--total", "10", "--delay", "30",
        "--tenant", "acme", "--idempotency-key", "upload-1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout == f"{uuid.UUID(result.stdout.strip())}\n"
    row = db.job(result.stdout.strip())
    assert (row["kind"], row["queue"], row["tenant"], row["state"]) == ("resize", "media", "acme", "queued")
    assert row["payload"] == {"image": "a.png", "sizes": [1, 2]}
    assert (row["priority"], row["max_attempts"], row["total"]) == (7, 5, 10)
    assert row["idempotency_key"] == "upload-1"
    assert (row["run_after"] - row["created_at"]).total_seconds() == pytest.approx(30, abs=1)


def test_enqueue_defaults(run: Run, db: Database) -> None:
    row = db.job(enqueue(run, "hello"))
    assert row["payload"] == {}
    assert (row["queue"], row["tenant"], row["priority"], row["max_attempts"]) == ("default", "default", 0, 3)
    assert row["total"] is None and row["idempotency_key"] is None
    assert row["run_after"] == row["created_at"]


def test_enqueue_with_a_used_idempotency_key_prints_the_first_job(run: Run, db: Database) -> None:
    first = enqueue(run, "hello", "--idempotency-key", "k")
    assert enqueue(run, "hello", "--idempotency-key", "k") == first
    assert db.count("jobs") == 1


def test_enqueue_of_another_job_with_a_used_idempotency_key_is_refused_as_the_api_does(run: Run, db: Database) -> None:
    first = enqueue(run, "hello", "--idempotency-key", "k", "--payload", '{"name": "ada"}')
    assert enqueue(run, "hello", "--idempotency-key", "k", "--payload", '{"name": "ada"}') == first

    refused = run("enqueue", "hello", "--idempotency-key", "k", "--payload", '{"name": "bob"}')

    assert_one_line_error(refused, EXIT_FAILED)
    assert f"idempotency key 'k' was already used for job {first} with a different payload" in refused.stderr
    assert db.count("jobs") == 1


# -- status -------------------------------------------------------------------------------------


def test_status_json_has_the_api_field_names(run: Run) -> None:
    job_id = enqueue(run, "resize", "--total", "4", "--max-attempts", "2")
    result = run("status", str(job_id), "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert list(status) == STATUS_FIELDS
    assert status["job_id"] == str(job_id)
    assert {k: status[k] for k in ("kind", "queue", "state", "done", "total", "attempts", "max_attempts")} == {
        "kind": "resize", "queue": "default", "state": "queued", "done": 0, "total": 4,
        "attempts": 0, "max_attempts": 2,
    }  # fmt: skip
    assert (status["error"], status["stale"], status["cancel_requested"]) == (None, False, False)
    assert status["started_at"] is None and status["finished_at"] is None
    for name in ("created_at", "updated_at"):
        assert datetime.fromisoformat(status[name]).utcoffset() is not None, status[name]


def test_status_is_readable_by_default(run: Run) -> None:
    job_id = enqueue(run, "resize", "--total", "4")
    result = run("status", str(job_id))
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert lines["job_id"] == str(job_id)
    assert lines["state"] == "queued"
    assert lines["done"] == "0 of 4"
    assert lines["attempts"] == "0 of 3"


def test_status_of_a_failed_job_shows_its_error(run: Run, make_store: Callable[..., Store], store_url: str) -> None:
    job_id = enqueue(run, "resize", "--max-attempts", "1", "--total", "4")
    store = make_store(store_url)
    [claimed] = store.claim("worker-a", ["default"], 1, 30.0)
    store.heartbeat(claimed.lease, 30.0, done=2)
    fail_job(store, claimed, "ValueError: bad image\n  at line 3", retryable=False)

    status = json.loads(run("status", str(job_id), "--json").stdout)
    assert (status["state"], status["done"], status["total"], status["attempts"]) == ("failed", 2, 4, 1)
    assert status["error"] == "ValueError: bad image\n  at line 3"
    assert status["started_at"] is not None and status["finished_at"] is not None

    shown = run("status", str(job_id)).stdout
    assert shown.endswith("error:\n  ValueError: bad image\n    at line 3\n")


def test_status_of_a_job_waiting_to_retry_shows_its_last_error_and_when_it_is_due(
    run: Run, make_store: Callable[..., Store], store_url: str
) -> None:
    job_id = enqueue(run, "resize")
    store = make_store(store_url)
    [claimed] = store.claim("worker-a", ["default"], 1, 30.0)
    fail_job(store, claimed, "TimeoutError", retryable=True)
    status = json.loads(run("status", str(job_id), "--json").stdout)
    assert (status["state"], status["attempts"], status["error"]) == ("queued", 1, "TimeoutError")
    retry = store.get(job_id)
    expected = retry.run_after.astimezone(UTC).isoformat().replace("+00:00", "Z")
    assert status["run_after"] == (expected if retry.run_after > retry.updated_at else None)


def test_status_of_a_running_job_with_an_expired_lease_is_stale(
    run: Run, make_store: Callable[..., Store], store_url: str
) -> None:
    an_hour_ago = FakeClock(datetime.now(UTC) - timedelta(hours=1))
    store = make_store(store_url, clock=an_hour_ago)
    job_id = store.enqueue(NewJob(kind="resize")).id
    store.claim("worker-a", ["default"], 1, 60.0)  # its lease ran out 59 minutes ago

    status = json.loads(run("status", str(job_id), "--json").stdout)
    assert (status["state"], status["stale"]) == ("running", True)
    [state_line] = [line for line in run("status", str(job_id)).stdout.splitlines() if line.startswith("state ")]
    assert "running (stale" in state_line


# -- bad input: one line on stderr, a non-zero exit, nothing written -------------------------------

NOT_A_JOB = "01900000-0000-7000-8000-000000000000"

BAD_INPUT = {
    "payload not JSON": (["enqueue", "x", "--payload", "{"], EXIT_USAGE),
    "payload a list": (["enqueue", "x", "--payload", "[1, 2]"], EXIT_USAGE),
    "payload a string": (["enqueue", "x", "--payload", '"text"'], EXIT_USAGE),
    "payload NaN": (["enqueue", "x", "--payload", '{"a": NaN}'], EXIT_USAGE),
    "negative priority": (["enqueue", "x", "--priority", "-1"], EXIT_USAGE),
    "priority not a number": (["enqueue", "x", "--priority", "high"], EXIT_USAGE),
    "zero max attempts": (["enqueue", "x", "--max-attempts", "0"], EXIT_USAGE),
    "negative total": (["enqueue", "x", "--total", "-1"], EXIT_USAGE),
    "negative delay": (["enqueue", "x", "--delay", "-5"], EXIT_USAGE),
    "empty kind": (["enqueue", ""], EXIT_USAGE),
    "missing kind": (["enqueue"], EXIT_USAGE),
    "unknown option": (["enqueue", "x", "--colour", "red"], EXIT_USAGE),
    "unknown command": (["frobnicate"], EXIT_USAGE),
    "malformed job id": (["status", "not-a-uuid"], EXIT_USAGE),
    "unknown job id": (["status", NOT_A_JOB], EXIT_FAILED),
    "unknown job id, json": (["status", NOT_A_JOB, "--json"], EXIT_FAILED),
}


@pytest.mark.parametrize("args, code", BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_is_one_line_and_writes_nothing(run: Run, db: Database, args: list[str], code: int) -> None:
    assert_one_line_error(run(*args), code)
    assert db.count("jobs") == 0


def test_bad_settings_are_usage_errors(run: Run, db: Database, tmp_path: Path) -> None:
    assert_one_line_error(run("enqueue", "x", env={"JOBQ_POOL_SIZE": "0"}), EXIT_USAGE)
    assert_one_line_error(jobq("--database-url", "mysql://db/x", "enqueue", "x", url=None, cwd=tmp_path), EXIT_USAGE)
    assert db.count("jobs") == 0


# -- the database is not there, or not migrated ---------------------------------------------------


@pytest.mark.parametrize("args", [["enqueue", "x"], ["status", NOT_A_JOB]], ids=["enqueue", "status"])
def test_a_database_that_was_never_migrated_is_unavailable(empty_url: str, tmp_path: Path, args: list[str]) -> None:
    assert_one_line_error(jobq(*args, url=empty_url, cwd=tmp_path), EXIT_UNAVAILABLE)


@pytest.mark.parametrize(
    "args", [["migrate"], ["enqueue", "x"], ["status", NOT_A_JOB]], ids=["migrate", "enqueue", "status"]
)
def test_an_unreachable_sqlite_file_is_unavailable(tmp_path: Path, args: list[str]) -> None:
    url = sqlite_url_for(tmp_path / "no-such-dir" / "jobq.db")
    assert_one_line_error(jobq(*args, url=url, cwd=tmp_path), EXIT_UNAVAILABLE)


@pytest.mark.parametrize(
    "args",
    [["migrate"], ["status", NOT_A_JOB]],
    ids=["migrate", "status"],
)
def test_an_unreachable_postgres_is_unavailable_at_once(tmp_path: Path, args: list[str]) -> None:
    # Port 1 refuses at once, and so does the command: the store's first call looks before it waits
    # on its pool (which took its whole 10 s timeout before, 4 Dec).
    started = time.monotonic()
    result = jobq(*args, url="postgresql://postgres@127.0.0.1:1/jobq", cwd=tmp_path)
    assert_one_line_error(result, EXIT_UNAVAILABLE)
    assert time.monotonic() - started < 8.0  # the process's start included: loose, the machine is shared


# -- the entry points -------------------------------------------------------------------------------


def test_python_dash_m_service_is_the_same_command(tmp_path: Path) -> None:
    result = jobq("--help", url=None, cwd=tmp_path, command=[sys.executable, "-m", "service"])
    assert result.returncode == 0, result.stderr
    for command in ("migrate", "enqueue", "status"):
        assert command in result.stdout


def test_no_command_shows_the_help_and_fails(tmp_path: Path) -> None:
    result = jobq(url=None, cwd=tmp_path)
    assert result.returncode == EXIT_USAGE
    assert "enqueue" in result.stdout
    assert not (tmp_path / "jobq.db").exists()


# -- workflows: jobq enqueue --after ------------------------------------------------------------


def test_enqueue_after_parents_waits_for_them_and_status_shows_the_count(run: Run, db: Database) -> None:
    first, second = enqueue(run, "transcribe"), enqueue(run, "transcribe")
    child = enqueue(run, "publish", "--after", str(first), "--after", str(second), "--on-parent-failure", "run")

    row = db.job(str(child))
    assert (row["parents_total"], row["parents_pending"], row["on_parent_failure"]) == (2, 2, "run")
    status = run("status", str(child))
    assert "parents           0 of 2 done" in status.stdout
    # Both parents were independent jobs: they join the child's workflow, rooted at the older.
    assert f"workflow          {first}" in status.stdout
    assert f"workflow          {first}" in run("status", str(second)).stdout
    assert "workflow" not in run("status", str(enqueue(run, "alone"))).stdout  # an independent job: no line
    explained = run("explain", str(child))
    assert explained.returncode == 0 and "waiting for 2 of 2 parents" in explained.stdout


def test_enqueue_after_an_unknown_job_is_refused_in_one_line(run: Run, db: Database) -> None:
    result = run("enqueue", "publish", "--after", str(uuid.uuid4()))
    assert_one_line_error(result, 1)
    assert "not found" in result.stderr
    assert db.count("jobs") == 0
    assert_one_line_error(run("enqueue", "publish", "--after", "nope"), 2)
