"""``jobq alert-check`` (exit 0 or 1, one line why) and ``jobq stats``, on both stores."""

from __future__ import annotations

import json

from service.jobs import NewJob, WorkerInfo
from service.store import Store
from tests.cli.test_cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, assert_one_line_error
from tests.conftest import Database
from tests.ops.conftest import Run, backdate, claim_all, fail_jobs, succeed_jobs


def check(cli: Run, *args: str) -> tuple[int, str]:
    result = cli("alert-check", *args)
    assert result.stderr == "", result.stderr
    [line] = result.stdout.splitlines()
    return result.returncode, line


def test_alert_check_exits_1_over_the_ratio_and_0_under_it(cli: Run, live: Store, db: Database) -> None:
    succeed_jobs(live, "resize", 8)
    failed = fail_jobs(live, "resize", ["boom 1", "boom 2"])
    fail_jobs(live, "ocr", ["KeyError: 'x'"])

    code, line = check(cli, "--max-failure-ratio", "0.25")
    assert code == EXIT_OK and line.startswith("OK: highest failure ratio 0.20 (resize, 2 of 10)"), line

    code, line = check(cli, "--max-failure-ratio", "0.1")
    assert code == EXIT_FAILED and line == "ALERT: resize failed 2 of 10 jobs in the last 1h (ratio 0.20 > 0.1)"

    # ocr's one failure is judged only when one job is enough; --kind judges one kind.
    code, line = check(cli, "--max-failure-ratio", "0.5", "--min-jobs", "1")
    assert code == EXIT_FAILED and line.startswith("ALERT: ocr failed 1 of 1 jobs"), line
    assert check(cli, "--max-failure-ratio", "0.5", "--min-jobs", "1", "--kind", "resize")[0] == EXIT_OK

    # A rate over a window: failures two hours ago are outside the last hour.
    backdate(db, 2 / 24, "id IN (%(a)s, %(b)s)", a=failed[0].id, b=failed[1].id)
    code, line = check(cli, "--max-failure-ratio", "0.1", "--min-jobs", "8")
    assert code == EXIT_OK and "(resize, 0 of 8)" in line, line
    assert check(cli, "--max-failure-ratio", "0.1", "--min-jobs", "8", "--window", "3h")[0] == EXIT_FAILED


def test_alert_check_with_nothing_to_judge_is_ok(cli: Run) -> None:
    code, line = check(cli, "--max-failure-ratio", "0")
    assert code == EXIT_OK and line.startswith("OK: no kind finished 10 or more jobs"), line


def test_alert_check_refuses_bad_thresholds(cli: Run) -> None:
    for args in (
        [],
        ["--max-failure-ratio", "1.5"],
        ["--max-failure-ratio", "-0.1"],
        ["--max-failure-ratio", "nan"],
        ["--max-failure-ratio", "0.2", "--min-jobs", "0"],
        ["--max-failure-ratio", "0.2", "--window", "0s"],
        ["--max-failure-ratio", "0.2", "--window", "an hour"],
    ):
        assert_one_line_error(cli("alert-check", *args), EXIT_USAGE)


def test_stats_shows_queues_kinds_and_live_workers(cli: Run, live: Store, db: Database) -> None:
    live.enqueue_many([NewJob(kind="resize"), NewJob(kind="resize"), NewJob(kind="ocr")])
    [running] = claim_all(live, "ocr")
    live.enqueue(NewJob(kind="render", queue="gpu", delay_seconds=3_600))  # queued, not yet due
    succeed_jobs(live, "resize", 3, queue="fast")
    fail_jobs(live, "ocr", ["boom"], queue="fast")
    live.register_worker(WorkerInfo("w-live", "host", 1, ("default", "reports"), ("resize",), 2))
    live.register_worker(WorkerInfo("w-gone", "host", 2, ("gpu",), ("render",), 1))
    backdate(db, 1, "id = 'w-gone'", table="workers", column="last_seen_at")

    result = cli("stats", "--json")

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    queues = {q["queue"]: q for q in report["queues"]}
    assert sorted(queues) == ["default", "gpu", "reports"]
    assert {k: queues["default"][k] for k in ("queued", "due", "running", "workers")} == {
        "queued": 2, "due": 2, "running": 1, "workers": 1,
    }  # fmt: skip
    assert 0 <= queues["default"]["oldest_queued_age_seconds"] < 60
    assert queues["gpu"] == {"queue": "gpu", "queued": 1, "due": 0, "running": 0, "oldest_queued_age_seconds": None,
                             "workers": 0}  # fmt: skip
    assert queues["reports"]["workers"] == 1 and queues["reports"]["queued"] == 0
    assert report["kinds"] == [
        {"kind": "ocr", "succeeded": 0, "failed": 1, "failure_ratio": 1.0},
        {"kind": "resize", "succeeded": 3, "failed": 0, "failure_ratio": 0.0},
    ]
    assert report["workers_alive"] == 1
    assert running.kind == "ocr"

    table = cli("stats")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["QUEUE", "QUEUED", "RUNNING", "OLDEST", "DUE", "WORKERS"]
    assert lines[1].split()[:3] == ["default", "2", "1"] and lines[2].split() == ["gpu", "1", "0", "-", "0"]
    assert any(line.split() == ["resize", "3", "0", "0.00"] for line in lines), table.stdout
    assert lines[-1] == "workers alive: 1"


def test_stats_of_an_empty_queue(cli: Run) -> None:
    result = cli("stats")
    assert result.returncode == 0, result.stderr
    assert "(no queued or running jobs)" in result.stdout and result.stdout.endswith("workers alive: 0\n")
