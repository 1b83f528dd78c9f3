"""Rollbacks: release N (this checkout) on the schema of release N+1.

Release N+1 is simulated by one test-only revision on top of this release's head, kept in a
versions folder of the test's own (Alembic's ``version_locations``): this release's code never
sees its file, exactly as a rolled-back release never sees its successor's migrations. It adds
a nullable column, an expand-only change; the test marks it ``compatible_with_previous`` or not.

- marked compatible: ``jobq migrate`` says the schema is ahead and compatible and succeeds (so a
  migration Job gating the rollback passes), ``/readyz`` is ready, a worker starts and runs jobs;
- not marked: ``jobq migrate`` prints one line and exits 3, ``/readyz`` is a 503 schema-mismatch
  problem saying "ahead", the worker waits saying "ahead" (not "behind", not "run jobq migrate");
- behind (one revision down) is still "behind" everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.script import ScriptDirectory

from service.store.migrate import alembic_config, downgrade, migrations_folder, schema_status
from tests.api.conftest import REPO, LiveApi, WorkerProcess
from tests.api.problems import assert_problem

NEXT_REVISION = "9001"

REVISION_FILE = '''"""Release N+1's migration, for the rollback tests only: one nullable column."""

import sqlalchemy as sa

from alembic import op

revision = "{revision}"
down_revision = "{down_revision}"
branch_labels = None
depends_on = None
{marker}

def upgrade() -> None:
    op.add_column("jobs", sa.Column("rollback_probe", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "rollback_probe")
'''


def migrate_as_next_release(url: str, versions: Path, *, compatible: bool) -> None:
    """What release N+1's `jobq migrate` does: its revisions are this release's plus one."""
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    marker = "compatible_with_previous = True\n" if compatible else ""
    versions.mkdir()
    (versions / f"{NEXT_REVISION}_next_release.py").write_text(
        REVISION_FILE.format(revision=NEXT_REVISION, down_revision=head, marker=marker)
    )
    config = alembic_config(url)
    config.set_main_option("path_separator", "os")
    config.set_main_option("version_locations", os.pathsep.join([str(migrations_folder() / "versions"), str(versions)]))
    command.upgrade(config, "heads")


def jobq(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JOBQ_DATABASE_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "service", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )


def wait_for(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def worker_events(worker: WorkerProcess, name: str) -> list[dict[str, object]]:
    events = []
    for line in worker.output().splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == name:
                events.append(event)
    return events


def test_release_n_runs_on_a_schema_ahead_when_the_newer_revision_is_marked_compatible(
    store_url: str,
    tmp_path: Path,
    start_api: Callable[..., LiveApi],
    start_worker: Callable[..., WorkerProcess],
) -> None:
    migrate_as_next_release(store_url, tmp_path / "next_versions", compatible=True)
    assert schema_status(store_url).state == "ahead, compatible"

    # The migration Job of release N (a rollback re-runs it) passes, with one line that says so.
    migrated = jobq(store_url, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "Traceback" not in migrated.stderr and len(migrated.stderr.strip().splitlines()) == 1
    assert "ahead of this jobq" in migrated.stderr and "compatible" in migrated.stderr
    assert schema_status(store_url).state == "ahead, compatible"  # nothing was undone

    api = start_api(store_url)
    assert api.http().get("/readyz").json() == {"status": "ready"}
    http = api.http(api.token())
    submitted = http.post("/v1/jobs", json={"kind": "sleep", "payload": {"seconds": 0}})
    assert submitted.status_code == 202, submitted.text

    worker = start_worker(store_url, "--poll-seconds", "0.2")
    job = submitted.json()["job_id"]
    wait_for(lambda: http.get(f"/v1/jobs/{job}").json()["state"] == "succeeded", 60, "the job to succeed")
    assert worker_events(worker, "worker.schema_ahead_compatible"), worker.output()
    assert not worker_events(worker, "worker.waiting_for_database"), worker.output()


def test_release_n_refuses_a_schema_ahead_that_is_not_marked_compatible_and_says_ahead(
    store_url: str,
    tmp_path: Path,
    start_api: Callable[..., LiveApi],
    start_worker: Callable[..., WorkerProcess],
) -> None:
    migrate_as_next_release(store_url, tmp_path / "next_versions", compatible=False)

    migrated = jobq(store_url, "migrate")
    assert migrated.returncode == 3, migrated.stderr
    lines = migrated.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), migrated.stderr
    assert f"(revision {NEXT_REVISION}) is ahead of this jobq" in lines[0] and "behind" not in lines[0]

    api = start_api(store_url)
    response = api.http().get("/readyz")
    problem = assert_problem(response, 503, "schema-mismatch")
    assert problem["schema"] == "ahead" and "ahead of this jobq" in problem["detail"], problem
    assert "behind" not in problem["detail"] and "run `jobq migrate`" not in problem["detail"]

    worker = start_worker(store_url, "--wait-for-database", "2")
    assert worker.process.wait(timeout=60) != 0
    waiting = worker_events(worker, "worker.waiting_for_database")
    assert waiting, worker.output()
    assert "ahead of this jobq" in str(waiting[0]["error"]) and "behind" not in str(waiting[0]["error"])
    assert "run `jobq migrate`" not in str(waiting[0]["todo"]), waiting[0]


def test_a_schema_behind_is_called_behind_everywhere(
    store_url: str, start_api: Callable[..., LiveApi], start_worker: Callable[..., WorkerProcess]
) -> None:
    scripts = ScriptDirectory.from_config(alembic_config(store_url))
    head = scripts.get_revision(scripts.get_current_head())
    assert head is not None and isinstance(head.down_revision, str)
    downgrade(store_url, head.down_revision)

    problem = assert_problem(start_api(store_url).http().get("/readyz"), 503, "schema-mismatch")
    assert problem["schema"] == "behind" and "run `jobq migrate`" in problem["detail"], problem
    worker = start_worker(store_url, "--wait-for-database", "1")
    assert worker.process.wait(timeout=60) != 0
    waiting = worker_events(worker, "worker.waiting_for_database")
    assert waiting and "behind this jobq" in str(waiting[0]["error"]), worker.output()
    assert jobq(store_url, "migrate").returncode == 0
    assert schema_status(store_url).state == "current"
