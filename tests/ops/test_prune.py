"""Retention: ``jobq prune`` deletes old terminal jobs with their rows, in small batches,
never a queued or running job, never younger history, and runs while a worker is busy;
workers with ``--retention`` do the same as jobs expire, a small batch a turn."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from service.errors import InvalidInput
from service.jobs import NewJob, ReplayFilter
from service.maintenance.pruner import Pruner
from service.maintenance.rollup import Rollup
from service.store import Store
from service.worker.runtime import RETENTION_BATCH
from tests.cli.test_cli import EXIT_USAGE, assert_one_line_error
from tests.conftest import Database
from tests.ops.conftest import (
    OPS_APP,
    Run,
    backdate,
    cancel_job,
    claim_all,
    db_time,
    fail_jobs,
    succeed_jobs,
)
from tests.store.builders import fail_job
from tests.worker.harness import WorkerProcess, wait_until

DAY = 86_400
RELATED = ("job_attempts", "job_results", "job_replays")


def related_rows(db: Database, ids: list[str]) -> int:
    marks = ", ".join(f"%(id{i})s" for i in range(len(ids)))
    params = {f"id{i}": job_id for i, job_id in enumerate(ids)}
    return sum(db.count(table, f"job_id IN ({marks})", **params) for table in RELATED)


def test_prune_deletes_old_terminal_jobs_with_their_rows_and_nothing_else(cli: Run, live: Store, db: Database) -> None:
    [done] = succeed_jobs(live, "resize", 1)
    [failed] = fail_jobs(live, "resize", ["boom"])
    cancelled = cancel_job(live, "resize")
    [replayed] = fail_jobs(live, "ocr", ["first"])  # failed, replayed, failed again: a replay record
    live.replay(ReplayFilter(ids=(replayed.id,)), by="test")
    fail_job(live, claim_all(live, "ocr")[0], "second", retryable=False)
    old = [str(job.id) for job in (done, failed, cancelled, replayed)]
    backdate(db, 50, "state IN ('succeeded', 'failed', 'cancelled')")
    young = [str(j.id) for j in (*succeed_jobs(live, "resize", 1), *fail_jobs(live, "resize", ["young"]))]
    backdate(db, 10, "id IN (%(a)s, %(b)s)", a=young[0], b=young[1])
    active = [str(j.id) for j in live.enqueue_many([NewJob(kind="resize", queue="slow")] * 2)]
    [running] = claim_all(live, "resize", "slow", limit=1)
    backdate(db, 60, "state IN ('queued', 'running')", column="created_at")
    assert related_rows(db, old) == 6  # 4 attempts, 1 result, 1 replay
    total = db.count("jobs")

    dry = cli("prune", "--older-than", "42d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == "would delete 4 jobs finished more than 42d ago (dry run; nothing was deleted)\n"
    assert db.count("jobs") == total

    real = cli("prune", "--older-than", "42d", "--batch", "1")  # four transactions of one job
    assert (real.returncode, real.stdout) == (0, "deleted 4 jobs finished more than 42d ago\n"), real.stderr
    left = {row["id"] for row in db.rows("SELECT id FROM jobs")}
    assert left == {*young, *active}
    assert not left & set(old) and related_rows(db, old) == 0
    assert related_rows(db, young) == 3  # their attempts and the result stay
    assert cli("prune", "--older-than", "42d").stdout == "deleted 0 jobs finished more than 42d ago\n"

    # Under a day needs --force; even then queued and running jobs stay, however old.
    assert_one_line_error(cli("prune", "--older-than", "12h"), EXIT_USAGE)
    assert cli("prune", "--older-than", "12h", "--force").stdout.startswith("deleted 2 jobs")
    assert db.rows("SELECT state FROM jobs ORDER BY state") == [{"state": "queued"}, {"state": "running"}]
    assert live.get(running.id).lease_owner == "seeder"


def test_prune_refuses_bad_ages(cli: Run) -> None:
    for args in (
        [],
        ["--older-than", "0d"],
        ["--older-than", "six weeks"],
        ["--older-than", "42"],
        ["--older-than", "42d", "--pause", "-1"],
        ["--older-than", "42d", "--pause", "soon"],
        ["--older-than", "42d", "--batch", "0"],
        ["--older-than", "42d", "--batch", "10001"],
        ["--older-than", "42d", "--rollup-older-than", "41d"],
        ["--older-than", "42d", "--rollup-older-than", "a year"],
    ):
        assert_one_line_error(cli("prune", *args), EXIT_USAGE)


def test_prune_drops_the_rollups_days_past_its_own_longer_retention(cli: Run, live: Store, db: Database) -> None:
    succeed_jobs(live, "resize", 2)
    backdate(db, 500, "TRUE")
    Rollup(live).run_until_done()
    succeed_jobs(live, "resize", 1)
    backdate(db, 100, "finished_at > %(recent)s", recent=db_time(db, datetime.now(UTC) - timedelta(days=1)))
    Rollup(live).run_until_done()
    assert db.count("job_daily_rollup") == 2

    kept_longer = cli("prune", "--older-than", "42d", "--rollup-older-than", "600d")
    assert kept_longer.stdout == "deleted 3 jobs finished more than 42d ago\n", kept_longer.stderr
    assert db.count("job_daily_rollup") == 2  # the jobs are gone, their days' counts stay

    by_default = cli("prune", "--older-than", "42d")  # the rollup's default retention: 400 days
    rows = 1 + 2  # the day's count row, its run-time and wait histograms (one bucket each)
    assert by_default.stdout == (
        "deleted 0 jobs finished more than 42d ago\n"
        f"deleted {rows} rows of the daily rollup for days more than 400d ago\n"
    ), by_default.stderr
    assert db.count("job_daily_rollup") == 1


def test_the_pruner_deletes_one_small_batch_at_a_time(live: Store, db: Database) -> None:
    succeed_jobs(live, "resize", 25)
    backdate(db, 50, "TRUE")
    pruner = Pruner(live, 42 * DAY, batch=10)

    assert pruner.run_once() == 10
    assert db.count("jobs") == 15
    assert pruner.run_until_done() == 15
    assert pruner.run_once() == 0 and db.count("jobs") == 0

    for older_than, batch in [(0, 10), (-1, 10), (DAY, 0), (DAY, 100_000)]:
        with pytest.raises(InvalidInput):
            Pruner(live, older_than, batch=batch)


def test_prune_runs_while_a_worker_is_busy(
    run: Run, live: Store, db: Database, worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    worker("--lease-seconds", "3")  # heartbeats every second: a prune that blocked them would cost the lease
    release = tmp_path / "release"
    busy = live.enqueue(NewJob(kind="hold", payload={"release": str(release)}))
    wait_until(lambda: live.get(busy.id).state.value == "running", 30, what="the hold job to start")
    succeed_jobs(live, "history", 2_500, queue="history")
    backdate(db, 50, "queue = 'history'")

    result = run("prune", "--older-than", "42d")

    assert result.returncode == 0, result.stderr
    assert result.stdout == "deleted 2500 jobs finished more than 42d ago\n"
    assert db.count("jobs", "queue = 'history'") == 0
    assert live.get(busy.id).state.value == "running"  # untouched while it ran
    release.touch()
    wait_until(lambda: live.get(busy.id).state.terminal, 30, what="the hold job to finish")
    assert live.get(busy.id).state.value == "succeeded"
    assert [a["outcome"] for a in db.attempts(busy.id)] == ["succeeded"]  # its lease was never lost


def test_workers_with_a_retention_share_the_expired_history_a_small_batch_at_a_time(
    live: Store, db: Database, worker: Callable[..., WorkerProcess]
) -> None:
    expired = [str(j.id) for j in succeed_jobs(live, "resize", 2 * RETENTION_BATCH + 20)]
    backdate(db, 50, "TRUE")
    young = [str(j.id) for j in succeed_jobs(live, "resize", 2)]
    backdate(db, 10, "id IN (%(a)s, %(b)s)", a=young[0], b=young[1])
    active = [str(j.id) for j in live.enqueue_many([NewJob(kind="resize", queue="slow")] * 2)]
    backdate(db, 60, "state = 'queued'", column="created_at")
    assert related_rows(db, expired) == len(expired) * 2  # an attempt and a result each

    fleet = [worker("--retention", "42d", "--retention-every", "0.1", "--log-level", "debug") for _ in range(2)]

    cutoff = db_time(db, datetime.now(UTC) - timedelta(days=42))
    wait_until(
        lambda: db.count("jobs", "finished_at < %(cutoff)s", cutoff=cutoff) == 0,
        30,
        what="the worker's retention to delete the expired jobs",
    )
    assert related_rows(db, expired) == 0
    assert sorted(str(r["id"]) for r in db.rows("SELECT id FROM jobs")) == sorted(young + active)

    def turns() -> list[int]:  # the log line follows the turn's commit: wait for the last one
        return [event["deleted"] for process in fleet for event in process.events("worker.retention_pruned")]

    wait_until(lambda: sum(turns()) >= len(expired), 10, what="the last turn's log line")
    assert sum(turns()) == len(expired), turns()  # each job deleted once, by one worker
    assert max(turns()) <= RETENTION_BATCH and len(turns()) >= 3, turns()


def test_a_worker_refuses_a_retention_under_a_day(run: Run) -> None:
    for retention, says in [("2h", "keeps less than a day"), ("soon", "--retention must be")]:
        result = run("worker", "--app", OPS_APP, "--retention", retention)
        assert_one_line_error(result, EXIT_USAGE)
        assert says in result.stderr, result.stderr
