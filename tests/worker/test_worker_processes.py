"""Real ``jobq worker`` processes on PostgreSQL: pickup latency, cancel, graceful and hard stops,
resume from a checkpoint, connections per process.

The heavier fault tests (chaos kill, database restart, partition, poison) are in
``test_worker_faults.py``. Every test here is bounded by its own timeouts.
"""

from __future__ import annotations

import json
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from service.jobs import NewJob
from service.store import Store
from tests.conftest import Database
from tests.worker.harness import Fleet, wait_until

pytestmark = pytest.mark.slow


def markers(directory: Path, job_id: object, name: str) -> list[dict[str, Any]]:
    path = directory / f"{job_id}.{name}"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def job_state(pg: Database, job_id: object) -> str:
    return str(pg.scalar("SELECT state FROM jobs WHERE id = %(id)s", id=job_id))


def test_pickup_latency_median_under_500ms(
    fleet: Fleet, pg_url: str, make_store: Callable[..., Store], pg: Database, tmp_path: Path
) -> None:
    """An idle worker wakes on NOTIFY: enqueue-to-handler-start over 50 trials.

    The poll interval is set to 5 s (2.5-7.5 s with jitter), so a fast median can
    only come from LISTEN/NOTIFY.
    """
    store = make_store(pg_url)
    worker = fleet.start("--concurrency", "1", "--lease-seconds", "10", "--poll-seconds", "5")
    worker.wait_started()
    time.sleep(0.5)  # let the listener LISTEN
    latencies = []
    for _ in range(50):
        enqueued_at = time.time()
        job = store.enqueue(NewJob(kind="stamp", payload={"markers": str(tmp_path)}))
        started = wait_until(lambda j=job: markers(tmp_path, j.id, "start"), 10, interval=0.005, what="handler start")
        latencies.append(started[0]["at"] - enqueued_at)
        wait_until(lambda j=job: job_state(pg, j.id) == "succeeded", 10, interval=0.01, what="job to succeed")
    median = statistics.median(latencies)
    p95 = sorted(latencies)[int(0.95 * len(latencies)) - 1]
    print(
        f"\npickup latency over {len(latencies)} trials: median {median * 1000:.1f} ms, "
        f"p95 {p95 * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms"
    )
    assert median < 0.5, f"median pickup {median:.3f} s"


def test_cancel_while_running_is_seen_within_one_heartbeat(
    fleet: Fleet, pg_url: str, make_store: Callable[..., Store], pg: Database, tmp_path: Path
) -> None:
    lease = 3.0  # heartbeats every second
    store = make_store(pg_url)
    worker = fleet.start("--concurrency", "1", "--lease-seconds", str(lease))
    job = store.enqueue(NewJob(kind="probe", payload={"markers": str(tmp_path), "seconds": 60}))
    wait_until(lambda: markers(tmp_path, job.id, "start"), 20, what="the handler to start")
    time.sleep(0.2)
    asked_at = time.time()
    store.cancel(job.id)
    stopped = wait_until(lambda: markers(tmp_path, job.id, "stopped"), 10, what="the handler to see the cancel")
    wait_until(lambda: job_state(pg, job.id) == "cancelled", 10, what="the job to end cancelled")
    seen_after = stopped[0]["at"] - asked_at
    print(f"\ncancel seen by the handler after {seen_after * 1000:.0f} ms (heartbeat every {lease / 3:g} s)")
    assert stopped[0]["reason"] == "cancelled"
    assert seen_after <= lease / 3 + 0.5  # one heartbeat interval, plus slack for a busy machine
    assert [a["outcome"] for a in pg.attempts(job.id)] == ["cancelled"]
    # The worker logs the event after its acknowledgement commits, so the log may trail the row.
    wait_until(lambda: worker.events("job.cancelled"), 10, what="the worker to log the cancel")
    assert [e["job_id"] for e in worker.events("job.cancelled")] == [str(job.id)]


def test_graceful_sigterm_hands_jobs_back_at_once(
    fleet: Fleet, pg_url: str, make_store: Callable[..., Store], pg: Database, tmp_path: Path
) -> None:
    """SIGTERM: stop claiming, grace, release; another worker takes over long before the lease would expire."""
    lease = 30.0
    store = make_store(pg_url)
    first = fleet.start("--concurrency", "2", "--lease-seconds", str(lease), "--grace-seconds", "1")
    first_id = first.wait_started()
    jobs = [
        store.enqueue(NewJob(kind="probe", payload={"markers": str(tmp_path), "seconds": 60, "later_seconds": 0.2}))
        for _ in range(2)
    ]
    wait_until(lambda: all(markers(tmp_path, j.id, "start") for j in jobs), 20, what="both jobs to start")
    second = fleet.start("--concurrency", "2", "--lease-seconds", str(lease), "--poll-seconds", "0.5")
    second_id = second.wait_started()

    signalled_at = time.monotonic()
    first.terminate()
    assert first.wait(timeout=10) == 0
    exited_after = time.monotonic() - signalled_at
    wait_until(
        lambda: all(job_state(pg, j.id) == "succeeded" for j in jobs), 10, what="the other worker to finish both jobs"
    )
    taken_over_after = time.monotonic() - signalled_at
    print(
        f"\nSIGTERM: exited after {exited_after:.2f} s, jobs done elsewhere after {taken_over_after:.2f} s "
        f"(lease {lease:g} s)"
    )
    assert exited_after < 1 + 4
    assert taken_over_after < lease / 3
    for job in jobs:
        attempts = pg.attempts(job.id)
        assert [(a["worker"], a["outcome"]) for a in attempts] == [(first_id, "released"), (second_id, "succeeded")]
        assert pg.job(job.id)["attempts"] == 1  # a hand-back is not charged
        assert markers(tmp_path, job.id, "stopped")[0]["reason"] == "shutdown"
    assert len(first.events("job.released")) == 2
    assert first.events("worker.stopped")


def test_second_signal_exits_at_once(
    fleet: Fleet, pg_url: str, make_store: Callable[..., Store], tmp_path: Path
) -> None:
    store = make_store(pg_url)
    worker = fleet.start("--concurrency", "1", "--lease-seconds", "5", "--grace-seconds", "60")
    job = store.enqueue(NewJob(kind="probe", payload={"markers": str(tmp_path), "seconds": 60}))
    wait_until(lambda: markers(tmp_path, job.id, "start"), 20, what="the handler to start")
    worker.terminate()
    time.sleep(0.5)
    assert worker.alive(), "the first signal must wait for the grace period"
    signalled_at = time.monotonic()
    worker.signal(signal.SIGINT)
    code = worker.wait(timeout=5)
    assert code == 128 + signal.SIGINT
    assert time.monotonic() - signalled_at < 2


def test_resume_runs_only_the_items_after_the_checkpoint(
    fleet: Fleet, pg_url: str, make_store: Callable[..., Store], pg: Database, tmp_path: Path
) -> None:
    """A 100-item classify job, its worker SIGKILLed at about item 50; the next attempt resumes."""
    store = make_store(pg_url)
    call_log = tmp_path / "calls.log"
    # The second worker reaps the first one's job once it leads the maintenance: within a leadership
    # lease as short as the job's (the default 15 s was most of this test's time).
    args = ("--concurrency", "1", "--lease-seconds", "2", "--leader-lease-seconds", "2")
    first = fleet.start(*args)
    job = store.enqueue(
        NewJob(
            kind="classify",
            payload={"items": list(range(100)), "delay": 0.05, "call_log": str(call_log)},
            max_attempts=3,
        )
    )
    wait_until(lambda: pg.job(job.id)["done"] >= 50, 30, interval=0.02, what="progress to reach 50")
    first.kill()
    killed = pg.job(job.id)
    position = killed["checkpoint"]["position"]
    calls_before_kill = len(call_log.read_text().splitlines())

    fleet.start(*args)
    wait_until(lambda: job_state(pg, job.id) == "succeeded", 30, what="the job to succeed on a second worker")
    calls = [tuple(map(int, line.split())) for line in call_log.read_text().splitlines()]
    first_attempt = [item for attempt, item in calls if attempt == 1]
    second_attempt = [item for attempt, item in calls if attempt == 2]
    print(
        f"\nkilled at progress {killed['done']} (~item {calls_before_kill}); checkpoint at {position}; "
        f"second attempt ran items {second_attempt[0]}..{second_attempt[-1]} ({len(second_attempt)} calls)"
    )

    assert 40 <= position <= calls_before_kill
    assert second_attempt == list(range(position, 100)), "the second attempt must start at the checkpoint"
    assert first_attempt == list(range(len(first_attempt)))  # each item once, in order
    assert all(calls.count((1, item)) + calls.count((2, item)) == 1 for item in range(position))
    result = store.get_result(job.id)
    assert [r["item"] for r in result["results"]] == list(range(100))
    assert [a["outcome"] for a in pg.attempts(job.id)] == ["lease_expired", "succeeded"]


def test_a_worker_uses_at_most_three_connections(
    fleet: Fleet, pg_url: str, make_store: Callable[..., Store], pg: Database, tmp_path: Path
) -> None:
    """Concurrency 8, jobs flowing: the process never holds more than pool (2) + listener (1)."""
    app_name = "jobq_connection_count"
    separator = "&" if "?" in pg_url else "?"
    worker = fleet.start(
        "--concurrency", "8", "--lease-seconds", "3", url=f"{pg_url}{separator}application_name={app_name}"
    )
    store = make_store(pg_url)
    worker.wait_started()
    jobs = store.enqueue_many([NewJob(kind="sleep", payload={"seconds": 0.3}) for _ in range(48)])
    most = running_most = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        most = max(
            most, pg.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = %(name)s", name=app_name)
        )
        running_most = max(running_most, pg.count("jobs", "state = 'running'"))
        if pg.count("jobs", "state = 'succeeded'") == len(jobs):
            break
        time.sleep(0.02)
    print(f"\nconnections held by one worker at concurrency 8: at most {most}; jobs running at once: {running_most}")
    assert pg.count("jobs", "state = 'succeeded'") == len(jobs)
    assert running_most == 8
    assert 1 <= most <= 3
