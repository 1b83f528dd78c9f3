"""The dead-letter path end to end, with a real worker process: a bug fails every job,
``failures`` shows one group, ``alert-check`` fires, the fix is deployed, ``replay`` (the
installed ``jobq`` command, as a process) puts the jobs back, the worker runs them to
success, the alert clears."""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from pathlib import Path

from service.jobs import NewJob
from service.store import Store
from tests.cli.test_cli import EXIT_FAILED, EXIT_OK
from tests.conftest import Database
from tests.ops.conftest import Run
from tests.worker.harness import WorkerProcess, wait_until

FLAKY_GROUP = "RuntimeError: row <id> could not be parsed (attempt N, buffer at <addr>)"


def test_fail_then_replay_then_succeed(
    cli: Run, run: Run, live: Store, db: Database, worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    bug = tmp_path / "bug"
    bug.touch()
    worker()
    jobs = live.enqueue_many(
        [NewJob(kind="flaky", payload={"bug": str(bug), "n": i}, max_attempts=2) for i in range(3)]
    )
    wait_until(lambda: db.count("jobs", "state = 'failed'") == 3, 60, what="the three jobs to fail")

    failures = cli("failures", "--json")
    assert failures.returncode == 0, failures.stderr
    [group] = json.loads(failures.stdout)["groups"]
    assert (group["kind"], group["error_group"], group["count"]) == ("flaky", FLAKY_GROUP, 3)
    alert = cli("alert-check", "--max-failure-ratio", "0.5", "--min-jobs", "3")
    assert (alert.returncode, alert.stdout.split(":")[0]) == (EXIT_FAILED, "ALERT"), alert

    bug.unlink()  # the fix is deployed
    replay = run("replay", "--kind", "flaky")
    assert (replay.returncode, replay.stdout) == (0, "replayed 3 jobs\n"), replay.stderr
    wait_until(lambda: db.count("jobs", "state = 'succeeded'") == 3, 60, what="the replayed jobs to succeed")

    for job in jobs:
        assert [a["outcome"] for a in db.attempts(job.id)] == ["failed", "failed", "succeeded"]
        assert live.get_result(job.id) == {"ok": True, "attempt": 1}  # attempts start again from zero
    replays = db.rows("SELECT replayed_by, previous_state, previous_attempts FROM job_replays")
    assert replays == [{"replayed_by": f"cli:{getpass.getuser()}", "previous_state": "failed",
                        "previous_attempts": 2}] * 3  # fmt: skip
    cleared = cli("alert-check", "--max-failure-ratio", "0.5", "--min-jobs", "3")
    assert (cleared.returncode, cleared.stdout.split(":")[0]) == (EXIT_OK, "OK"), cleared
    stats = json.loads(cli("stats", "--json").stdout)
    assert stats["kinds"] == [{"kind": "flaky", "succeeded": 3, "failed": 0, "failure_ratio": 0.0}]
    assert stats["workers_alive"] == 1
