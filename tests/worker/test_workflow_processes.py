"""Workflows with real ``jobq worker`` processes on PostgreSQL, one of them SIGKILLed every
2 seconds: the fan-in runs once, after every leaf succeeded, and sees every result; a chain
of 1,000 runs link after link (slow)."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from service.jobs import NewJob
from service.store import Store
from service.workflows import chain
from tests.conftest import Database
from tests.worker.harness import Fleet, wait_until

pytestmark = pytest.mark.slow

LEAVES = 1_000
"""The issue's size. Measured a run (2-core machine shared with other sessions): 21, 22, 18 and
26 s at load 8-12; 63 and 94 s when their load rose past 13. Most of a run is the kills' cost, not
the leaves': one worker of three is always starting again (3-10 s under load), and each kill
strands its 8 jobs for a lease. 500 leaves took 18-32 s: the fallback if this runs long in CI."""
LINKS = 1_000


def marker_lines(directory: Path, name: str) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in directory.glob(f"*.{name}")
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def test_fan_out_then_fan_in_under_sigkill_runs_the_last_job_once_after_every_leaf(
    fleet: Fleet, pg_url: str, make_store: Any, pg: Database, tmp_path: Path
) -> None:
    store: Store = make_store(pg_url)
    # A killed leader's successor reaps within the leadership lease: as short as the jobs' (the
    # default 15 s left a killed leader's jobs running ~10 s at a time, a 1,000-leaf run 60 s+).
    args = ("--concurrency", "8", "--lease-seconds", "2", "--poll-seconds", "0.5", "--leader-lease-seconds", "2")
    for _ in range(3):
        fleet.start(*args).wait_started()
    root = store.enqueue(NewJob("fan_out", {"leaves": LEAVES, "markers": str(tmp_path)}))

    kills = 0
    deadline = time.monotonic() + 240
    while pg.count("jobs", "kind = 'fan_in' AND state = 'succeeded'") == 0:
        assert time.monotonic() < deadline, "the workflow did not finish"
        assert pg.count("jobs", "state IN ('failed', 'cancelled')") == 0
        time.sleep(2)
        victim = random.choice(fleet.alive())
        victim.kill()
        kills += 1
        fleet.start(*args)

    assert kills >= 1
    assert pg.count("jobs", "kind = 'leaf'") == LEAVES  # the fan-out's children were written once
    assert pg.count("jobs", "kind = 'fan_in'") == 1
    assert pg.count("jobs", "kind = 'leaf' AND state = 'succeeded'") == LEAVES
    [fan_in_id] = [r["id"] for r in pg.rows("SELECT id FROM jobs WHERE kind = 'fan_in'")]
    runs = marker_lines(tmp_path, "fan_in")
    attempts = pg.rows("SELECT outcome FROM job_attempts WHERE job_id = %(id)s", id=fan_in_id)
    assert len(runs) == len(attempts) and [a["outcome"] for a in attempts].count("succeeded") == 1
    for run in runs:  # every run of it (once, unless its worker was killed under it) saw every leaf done
        assert run["parents"] == LEAVES and run["states"] == ["succeeded"]
        assert sorted(run["ns"]) == list(range(LEAVES))
    # It started after the last leaf finished, by the database's clock.
    first_start = pg.scalar("SELECT min(started_at) FROM job_attempts WHERE job_id = %(id)s", id=fan_in_id)
    last_leaf = pg.scalar("SELECT max(finished_at) FROM jobs WHERE kind = 'leaf'")
    assert first_start >= last_leaf
    assert store.get(root.id).state.value == "succeeded"


def test_a_chain_of_a_thousand_runs_each_link_after_its_parent_once(
    fleet: Fleet, pg_url: str, make_store: Any, pg: Database, tmp_path: Path
) -> None:
    store: Store = make_store(pg_url)
    for _ in range(2):
        fleet.start("--concurrency", "4", "--poll-seconds", "1").wait_started()
    flow = chain(*[NewJob("link", {"n": n, "markers": str(tmp_path)}) for n in range(LINKS)])
    links = store.enqueue_many(flow.jobs)

    wait_until(
        lambda: pg.count("jobs", "kind = 'link' AND state = 'succeeded'") == LINKS, 240, what="the chain to finish"
    )
    rows = pg.rows(
        "SELECT j.id, a.started_at, j.finished_at, (SELECT count(*) FROM job_attempts b WHERE b.job_id = j.id) AS n"
        " FROM jobs j JOIN job_attempts a ON a.job_id = j.id WHERE j.kind = 'link'"
    )
    by_id = {str(r["id"]): r for r in rows}
    assert all(r["n"] == 1 for r in rows)  # none ran twice
    for parent, child in zip(links, links[1:], strict=False):
        assert by_id[str(child.id)]["started_at"] >= by_id[str(parent.id)]["finished_at"]
    seen = sorted(marker_lines(tmp_path, "link"), key=lambda m: m["n"])
    assert [m["n"] for m in seen] == list(range(LINKS))
    assert seen[0]["parent"] == [] and all(m["parent"] == [{"n": m["n"] - 1}] for m in seen[1:])


def test_children_of_a_worker_paused_past_its_lease_never_appear(
    fleet: Fleet, pg_url: str, make_store: Any, pg: Database
) -> None:
    """SIGSTOP the worker running a handler that enqueued children; another worker reclaims the
    job and succeeds with its own children; the paused one, resumed, tries to write its result
    and children: fenced out, neither is written."""
    store: Store = make_store(pg_url)
    args = ("--concurrency", "1", "--lease-seconds", "2", "--poll-seconds", "0.5")
    paused = fleet.start(*args)
    paused.wait_started()
    job = store.enqueue(NewJob("parenting", {"seconds": 6}))
    wait_until(lambda: pg.count("job_attempts", "job_id = %(id)s", id=job.id) == 1, 20, what="the first claim")
    time.sleep(0.5)
    paused.signal(signal.SIGSTOP)
    fleet.start(*args)
    wait_until(lambda: store.get(job.id).state.value == "succeeded", 60, what="the other worker to succeed")
    paused.signal(signal.SIGCONT)
    wait_until(lambda: paused.events("job.lease_lost"), 30, what="the resumed worker to find its lease gone")
    time.sleep(1)  # its finisher's write, had anything been written

    children = pg.rows("SELECT payload FROM jobs WHERE kind = 'leaf'")
    assert sorted(c["payload"]["n"] for c in children) == [0, 1, 2]
    assert {c["payload"]["attempt"] for c in children} == {2}  # the winning attempt's, once
    assert store.get_result(job.id) == {"attempt": 2}
