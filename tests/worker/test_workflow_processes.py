"""Workflows with real ``jobq worker`` processes, on both stores (SQLite: one file the worker
processes share): a fan-out whose fan-in runs once, after every leaf succeeded and seeing every
result, while a worker is SIGKILLed every 2 seconds; a chain of 1,000 run link after link;
children of a SIGSTOPped attempt never written; a permanent failure cancelling a workflow that
a replay then re-arms to completion (slow)."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from service.jobs import NewJob, ReplayFilter
from service.store import Store
from service.workflows import chain
from tests.conftest import Database
from tests.worker.harness import Fleet, wait_until

pytestmark = pytest.mark.slow

LEAVES = 1_000
"""The issue's size, on both stores. PostgreSQL (2-core machine shared with other sessions): 21,
22, 18 and 26 s at load 8-12; 63 and 94 s when their load rose past 13. Most of a run is the
kills' cost, not the leaves': one worker of three is always starting again (3-10 s under load),
and each kill strands its 8 jobs for a lease. 500 leaves took 18-32 s: the fallback if this runs
long in CI. SQLite (one file, the three processes' writes taking turns): 14-17 s in 7 runs
(6-7 kills, 27-32 attempts cut short by them) at load 2-6, beside PostgreSQL's 15-33 s in the
same runs: the issue's size on both."""
LINKS = 1_000
"""The issue's size, on both stores: 3-8 s on SQLite, 7-24 s on PostgreSQL at load 2-6 (7 runs each)."""


def marker_lines(directory: Path, name: str) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in directory.glob(f"*.{name}")
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def test_fan_out_then_fan_in_under_sigkill_runs_the_last_job_once_after_every_leaf(
    store_fleet: Fleet, store_url: str, make_store: Any, db: Database, tmp_path: Path
) -> None:
    store: Store = make_store(store_url)
    # A killed leader's successor reaps within the leadership lease: as short as the jobs' (the
    # default 15 s left a killed leader's jobs running ~10 s at a time, a 1,000-leaf run 60 s+).
    args = ("--concurrency", "8", "--lease-seconds", "2", "--poll-seconds", "0.5", "--leader-lease-seconds", "2")
    for _ in range(3):
        store_fleet.start(*args).wait_started()
    root = store.enqueue(NewJob("fan_out", {"leaves": LEAVES, "markers": str(tmp_path)}))

    kills = 0
    deadline = time.monotonic() + 240
    while db.count("jobs", "kind = 'fan_in' AND state = 'succeeded'") == 0:
        assert time.monotonic() < deadline, "the workflow did not finish"
        assert db.count("jobs", "state IN ('failed', 'cancelled')") == 0
        time.sleep(2)
        victim = random.choice(store_fleet.alive())
        victim.kill()
        kills += 1
        store_fleet.start(*args)

    assert kills >= 1
    assert db.count("job_attempts", "outcome = 'lease_expired'") >= 1, "no kill ever hit a running job"
    assert db.count("jobs", "kind = 'leaf'") == LEAVES  # the fan-out's children were written once
    assert db.count("jobs", "kind = 'fan_in'") == 1
    assert db.count("jobs", "kind = 'leaf' AND state = 'succeeded'") == LEAVES
    fan_in_id = db.scalar("SELECT id FROM jobs WHERE kind = 'fan_in'")
    runs = marker_lines(tmp_path, "fan_in")
    attempts = db.rows("SELECT outcome FROM job_attempts WHERE job_id = %(id)s", id=fan_in_id)
    assert len(runs) == len(attempts) and [a["outcome"] for a in attempts].count("succeeded") == 1
    for run in runs:  # every run of it (once, unless its worker was killed under it) saw every leaf done
        assert run["parents"] == LEAVES and run["states"] == ["succeeded"]
        assert sorted(run["ns"]) == list(range(LEAVES))
    # It started after the last leaf finished, by the store's clock (the aliases end in _at: Database
    # reads them as timestamps on both stores).
    first_start = db.scalar("SELECT min(started_at) AS first_at FROM job_attempts WHERE job_id = %(id)s", id=fan_in_id)
    last_leaf = db.scalar("SELECT max(finished_at) AS last_at FROM jobs WHERE kind = 'leaf'")
    assert first_start >= last_leaf
    assert store.get(root.id).state.value == "succeeded"


def test_a_chain_of_a_thousand_runs_each_link_after_its_parent_once(
    store_fleet: Fleet, store_url: str, make_store: Any, db: Database, tmp_path: Path
) -> None:
    store: Store = make_store(store_url)
    for _ in range(2):
        store_fleet.start("--concurrency", "4", "--poll-seconds", "1").wait_started()
    flow = chain(*[NewJob("link", {"n": n, "markers": str(tmp_path)}) for n in range(LINKS)])
    links = store.enqueue_many(flow.jobs)

    wait_until(
        lambda: db.count("jobs", "kind = 'link' AND state = 'succeeded'") == LINKS, 240, what="the chain to finish"
    )
    assert_each_link_ran_once_after_its_parent(db, [link.id for link in links])
    seen = sorted(marker_lines(tmp_path, "link"), key=lambda m: m["n"])
    assert [m["n"] for m in seen] == list(range(LINKS))
    assert seen[0]["parent"] == [] and all(m["parent"] == [{"n": m["n"] - 1}] for m in seen[1:])


def assert_each_link_ran_once_after_its_parent(db: Database, chained: list[Any]) -> None:
    """Each job of ``chained`` (a chain, in order) ran exactly once, and started (its attempt's
    started_at) no earlier than its parent finished."""
    rows = db.rows(
        "SELECT j.id, a.started_at, j.finished_at, (SELECT count(*) FROM job_attempts b WHERE b.job_id = j.id) AS n"
        " FROM jobs j JOIN job_attempts a ON a.job_id = j.id"
    )
    by_id = {str(r["id"]): r for r in rows}
    assert all(by_id[str(job)]["n"] == 1 for job in chained)  # none ran twice
    for parent, child in zip(chained, chained[1:], strict=False):
        assert by_id[str(child)]["started_at"] >= by_id[str(parent)]["finished_at"]


def test_children_of_a_worker_paused_past_its_lease_never_appear(
    store_fleet: Fleet, store_url: str, make_store: Any, db: Database
) -> None:
    """SIGSTOP the worker running a handler that enqueued children; another worker reclaims the
    job and succeeds with its own children; the paused one, resumed, tries to write its result
    and children: fenced out, neither is written."""
    store: Store = make_store(store_url)
    args = ("--concurrency", "1", "--lease-seconds", "2", "--poll-seconds", "0.5")
    paused = store_fleet.start(*args)
    paused.wait_started()
    job = store.enqueue(NewJob("parenting", {"seconds": 6}))
    wait_until(lambda: db.count("job_attempts", "job_id = %(id)s", id=job.id) == 1, 20, what="the first claim")
    time.sleep(0.5)
    paused.signal(signal.SIGSTOP)
    store_fleet.start(*args)
    wait_until(lambda: store.get(job.id).state.value == "succeeded", 60, what="the other worker to succeed")
    paused.signal(signal.SIGCONT)
    wait_until(lambda: paused.events("job.lease_lost"), 30, what="the resumed worker to find its lease gone")
    time.sleep(1)  # its finisher's write, had anything been written

    children = db.rows("SELECT payload FROM jobs WHERE kind = 'leaf'")
    assert sorted(c["payload"]["n"] for c in children) == [0, 1, 2]
    assert {c["payload"]["attempt"] for c in children} == {2}  # the winning attempt's, once
    assert store.get_result(job.id) == {"attempt": 2}


def test_a_permanent_failure_cancels_the_workflow_below_it_and_a_replay_completes_it(
    store_fleet: Fleet, store_url: str, make_store: Any, db: Database, tmp_path: Path
) -> None:
    """gated -> link 1 -> link 2, and link 3 waiting for links 1 and 2: gated fails for good (one
    attempt, its gate closed), which cancels the three links below it (each naming its parent that
    ended), and none of them runs; with the gate open, replaying gated re-arms them (recorded in job_replays) and the whole
    workflow completes, each link once and after its parents."""
    store: Store = make_store(store_url)
    for _ in range(2):
        store_fleet.start("--concurrency", "4", "--poll-seconds", "0.2").wait_started()
    gate, markers = tmp_path / "gate", str(tmp_path)
    gated, one, two, three = store.enqueue_many(
        [
            NewJob("gated", {"gate": str(gate)}, max_attempts=1),
            NewJob("link", {"n": 1, "markers": markers}, depends_on=(0,)),
            NewJob("link", {"n": 2, "markers": markers}, depends_on=(1,)),
            NewJob("link", {"n": 3, "markers": markers}, depends_on=(1, 2)),
        ]
    )
    below = (one, two, three)

    wait_until(
        lambda: db.count("jobs", "kind = 'link' AND state = 'cancelled'") == 3, 60, what="the links to be cancelled"
    )
    assert store.get(gated.id).state.value == "failed"
    errors = {job.id: store.get(job.id).error for job in below}
    assert errors == {  # each names its parent that ended (link 3: whichever of its two counted first)
        one.id: f"cancelled: parent job {gated.id} failed",
        two.id: f"cancelled: parent job {one.id} was cancelled",
        three.id: errors[three.id],
    }
    assert errors[three.id] in {f"cancelled: parent job {p.id} was cancelled" for p in (one, two)}
    time.sleep(1)  # a link wrongly claimed would have run by now
    assert marker_lines(tmp_path, "link") == [] and db.count("job_attempts", "job_id <> %(id)s", id=gated.id) == 0

    gate.touch()
    assert store.replay(ReplayFilter(ids=(gated.id,)), by="ops") == [gated.id]
    rearmed = {r["job_id"] for r in db.rows("SELECT job_id FROM job_replays WHERE replayed_by LIKE '%re-armed%'")}
    assert rearmed == {str(job.id) for job in below}
    wait_until(lambda: db.count("jobs", "state = 'succeeded'") == 4, 60, what="the replayed workflow to complete")

    assert_each_link_ran_once_after_its_parent(db, [one.id, two.id, three.id])
    first_start = db.scalar("SELECT min(started_at) AS first_at FROM job_attempts WHERE job_id = %(id)s", id=one.id)
    assert first_start >= db.job(gated.id)["finished_at"]  # link 1 after the replayed gated succeeded
    seen = {m["n"]: m["parent"] for m in marker_lines(tmp_path, "link")}
    assert seen == {1: [{"gate": "open"}], 2: [{"n": 1}], 3: [{"n": 1}, {"n": 2}]}
