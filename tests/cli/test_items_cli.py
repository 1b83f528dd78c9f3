"""``jobq items`` and ``jobq replay --failed-items`` as subprocesses, on both stores."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from service.jobs import Completion, ItemOutcome, ItemQuery, ItemState, JobState, NewJob
from service.store import Store
from tests.cli.test_cli import EXIT_FAILED, EXIT_OK, assert_one_line_error, jobq
from tests.conftest import Database
from tests.store.builders import claim_one


def finished_with_failed_items(store: Store) -> Completion:
    store.enqueue(NewJob(kind="rows", total=4))
    job = claim_one(store)
    done = Completion(
        job.lease,
        "partial",
        items=(
            ItemOutcome(0, ItemState.OK, result={"n": 0}),
            ItemOutcome(1, ItemState.FAILED, error="ValueError: row 1\n\nTraceback ..."),
            ItemOutcome(2, ItemState.OK, result={"n": 2}),
            ItemOutcome(3, ItemState.FAILED, error="KeyError: 3"),
        ),
    )
    assert store.complete_many([done]) == []
    return done


def test_items_shows_the_outcomes_and_the_failed_ones(
    make_store: Callable[..., Store], store_url: str, tmp_path: Path
) -> None:
    done = finished_with_failed_items(make_store(store_url))
    job_id = str(done.lease.job_id)

    listed = jobq("items", job_id, url=store_url, cwd=tmp_path)
    failed = jobq("items", job_id, "--failed", "--json", url=store_url, cwd=tmp_path)

    assert listed.returncode == EXIT_OK, listed.stderr
    assert [line.split()[:2] for line in listed.stdout.splitlines()] == [
        ["0", "ok"],
        ["1", "failed"],
        ["2", "ok"],
        ["3", "failed"],
    ]
    assert "ValueError: row 1" in listed.stdout and "Traceback" not in listed.stdout
    assert failed.returncode == EXIT_OK, failed.stderr
    rows = [json.loads(line) for line in failed.stdout.splitlines()]
    assert [(r["index"], r["state"], r["error"].splitlines()[0], r["attempt"]) for r in rows] == [
        (1, "failed", "ValueError: row 1", 1),
        (3, "failed", "KeyError: 3", 1),
    ]
    assert_one_line_error(
        jobq("items", "01234567-89ab-7def-8123-456789abcdef", url=store_url, cwd=tmp_path), EXIT_FAILED
    )


def test_replay_failed_items_queues_the_job_with_only_those_left_to_run(
    make_store: Callable[..., Store], store_url: str, tmp_path: Path, db: Database
) -> None:
    store = make_store(store_url)
    done = finished_with_failed_items(store)
    job_id = done.lease.job_id

    replayed = jobq("replay", "--failed-items", str(job_id), url=store_url, cwd=tmp_path, env={"USER": "ann"})

    assert replayed.returncode == EXIT_OK, replayed.stderr
    assert replayed.stdout.strip() == "replayed 1 job"
    status = store.get(job_id)
    assert (status.state, status.attempts, status.items_ok, status.items_failed) == (JobState.QUEUED, 0, 2, 0)
    assert [r["replayed_by"] for r in db.rows("SELECT replayed_by FROM job_replays")] == ["cli:ann"]
    # The next attempt is told what is done: only items 1 and 3 are left.
    again = claim_one(store)
    assert (again.items_ok, again.items_failed) == (2, 0)
    assert [i.index for i in store.list_items(ItemQuery(job_id=job_id)).items] == [0, 2]
    # Nothing left to replay, and a job without failed items is named as not replayed.
    store.complete(again.lease, "all done")
    nothing = jobq("replay", "--failed-items", str(job_id), url=store_url, cwd=tmp_path)
    assert (nothing.returncode, nothing.stdout) == (EXIT_FAILED, "replayed 0 jobs\n")
    assert nothing.stderr.startswith("error: 1 of 1 ids not replayed (no such job, not a finished job with failed")
