"""Faults with real ``jobq worker`` processes on PostgreSQL: SIGKILL chaos, a database restart,
a network partition, a poison job. Each proves that no job is lost and none is left stuck,
and each is bounded in time.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from service.config import Settings
from service.jobs import NewJob
from service.store import Store, migrate, open_store
from tests.conftest import Database
from tests.private_postgres import PrivateServer, private_server  # noqa: F401 (the fixture)
from tests.worker.harness import Fleet, WorkerProcess, wait_until
from tests.worker.proxy import FaultProxy

pytestmark = pytest.mark.slow


def markers(directory: Path, job_id: object, name: str) -> list[dict[str, Any]]:
    path = directory / f"{job_id}.{name}"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def states(pg: Database) -> dict[str, int]:
    return {row["state"]: row["n"] for row in pg.rows("SELECT state, count(*) AS n FROM jobs GROUP BY state")}


def test_chaos_kill(fleet: Fleet, pg_url: str, make_store: Callable[..., Store], pg: Database) -> None:
    """4 workers, 800 jobs with a side effect keyed by job id; SIGKILL a random worker every ~1.2 s
    for 12 s, starting a replacement each time. Nothing is lost, nothing is stuck, nothing is done twice
    where it matters (the side-effect table), and job_attempts shows the reclaimed attempts.

    Sized so that jobs are still queued when the chaos ends (about 16 jobs run at once, 0.2 s
    each, and every kill costs a lease of 3 s), and the suite stays within its budget."""
    jobs, chaos_seconds = 800, 12
    started = time.monotonic()
    pg.execute("CREATE TABLE side_effects (job_id uuid PRIMARY KEY, worker text NOT NULL)")
    pg.execute("CREATE TABLE side_effect_runs (job_id uuid NOT NULL, worker text NOT NULL, attempt int NOT NULL)")
    store = make_store(pg_url)
    store.enqueue_many([NewJob(kind="side_effect", payload={"sleep": 0.2}, max_attempts=10) for _ in range(jobs)])
    args = ("--concurrency", "4", "--lease-seconds", "3", "--poll-seconds", "0.5", "--leader-lease-seconds", "3")
    env = {"JOBQ_SIDE_EFFECT_URL": pg_url}
    for _ in range(4):
        fleet.start(*args, env=env)
    # The chaos starts once the fleet works (starting four processes takes seconds on a busy machine).
    wait_until(lambda: pg.count("jobs", "state = 'succeeded'") > 0, 60, interval=0.2, what="the first job done")

    rng = random.Random(20301)
    killed: list[WorkerProcess] = []
    chaos_ends = time.monotonic() + chaos_seconds
    while time.monotonic() < chaos_ends:
        time.sleep(rng.uniform(0.8, 1.6))
        victim = rng.choice(fleet.alive())
        victim.kill()
        killed.append(victim)
        fleet.start(*args, env=env)
    done_during_chaos = pg.count("jobs", "state = 'succeeded'")

    wait_until(lambda: states(pg) == {"succeeded": jobs}, 60, interval=0.5, what="every job to succeed")
    elapsed = time.monotonic() - started
    reclaimed = pg.count("job_attempts", "outcome = 'lease_expired'")
    runs = pg.count("side_effect_runs")
    jobs_run_twice = pg.scalar(
        "SELECT count(*) FROM (SELECT job_id FROM side_effect_runs GROUP BY job_id HAVING count(*) > 1) AS t"
    )
    print(
        f"\nchaos: {len(killed)} SIGKILLs; {done_during_chaos} jobs done during the {chaos_seconds} s of chaos; "
        f"all {jobs} done after {elapsed:.1f} s; {reclaimed} attempts reclaimed after lease expiry; "
        f"{runs} handler runs recorded ({jobs_run_twice} jobs ran more than once, "
        f"the side effect stayed once per job)"
    )

    assert len(killed) >= 7
    assert states(pg) == {"succeeded": jobs}
    assert pg.count("side_effects") == jobs
    assert pg.count("jobs", "state = 'running' OR lease_owner IS NOT NULL AND state = 'queued'") == 0
    # one succeeded attempt per job: no job was completed twice
    assert pg.count("job_attempts", "outcome = 'succeeded'") == jobs
    assert pg.count("job_attempts", "outcome IS NULL") == 0
    assert reclaimed > 0
    killed_ids = {event["worker"] for w in killed for event in w.events("worker.started")}
    expired_by = {
        r["worker"] for r in pg.rows("SELECT DISTINCT worker FROM job_attempts WHERE outcome = 'lease_expired'")
    }
    assert expired_by <= killed_ids, "only killed workers lose leases"
    assert pg.count("jobs", "attempts > 1") > 0
    assert elapsed < 75


def test_database_restart(private_server: PrivateServer, tmp_path: Path) -> None:  # noqa: F811
    """Restart PostgreSQL while a worker runs jobs: every job finishes, the worker never exits,
    and it listens again (a job enqueued after the restart is picked up without waiting for a poll).

    The server is a private cluster (tests/private_postgres.py): restarting the shared test server
    broke every other test, and every other person, using it at the time."""
    url = private_server.url
    migrate.upgrade(url)
    with Fleet(url, tmp_path) as fleet:
        worker = fleet.start("--concurrency", "4", "--lease-seconds", "3", "--poll-seconds", "5")
        worker.wait_started()
        store = open_store(Settings(database_url=url))
        try:
            before = store.enqueue_many(
                [NewJob(kind="sleep", payload={"seconds": 0.5}, max_attempts=5) for _ in range(24)]
            )
            time.sleep(1.2)  # some done, some running
            restart_began = time.monotonic()
            private_server.restart()
            restarted_after = time.monotonic() - restart_began

            def enqueue_after() -> list[Any]:
                try:
                    return store.enqueue_many(
                        [NewJob(kind="sleep", payload={"seconds": 0.5}, max_attempts=5) for _ in range(8)]
                    )
                except Exception:  # the pool may still hand out a connection the restart killed
                    return []

            after = wait_until(enqueue_after, 20, interval=0.2, what="the database to accept jobs again")
            ids = [j.id for j in before + after]
            pg = Database(url)
            try:
                wait_until(
                    lambda: pg.count("jobs", "state = 'succeeded'") == len(ids),
                    60,
                    interval=0.2,
                    what="every job to finish",
                )
                assert worker.alive(), "a database restart must never kill the worker"
                assert pg.count("jobs", "state <> 'succeeded'") == 0
                # Listening again: with polls 2.5-7.5 s apart (and one just made when the last slot
                # freed), only a NOTIFY can start each of these within a second.
                pickups = []
                for _ in range(3):
                    enqueued_at = time.time()
                    stamp = store.enqueue(NewJob(kind="stamp", payload={"markers": str(tmp_path)}))
                    started = wait_until(
                        lambda s=stamp: markers(tmp_path, s.id, "start"), 10, interval=0.01, what="pickup"
                    )
                    pickups.append(started[0]["at"] - enqueued_at)
                    wait_until(lambda s=stamp: pg.job(s.id)["state"] == "succeeded", 10, what="the stamp job to finish")
                assert max(pickups) < 1.0, f"pickups after the restart: {pickups}"
            finally:
                pg.close()
        finally:
            store.close()
        outages = worker.events("store.unavailable")
        recoveries = worker.events("store.available")
        print(
            f"\ndatabase restart took {restarted_after:.1f} s; the worker logged {len(outages)} outage(s), "
            f"back after {recoveries[0]['down_s'] if recoveries else '?'} s; all {len(ids)} jobs succeeded"
        )
        # The store drops a pooled connection the restart ended before using it (service/store/postgres),
        # so a worker between statements may see no outage at all; one it saw has ended, once.
        assert len(outages) == len(recoveries) <= 1
        worker.terminate()
        assert worker.wait(timeout=15) == 0


def _via(url: str, port: int) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


def test_partition(fleet: Fleet, pg_url: str, make_store: Callable[..., Store], pg: Database, tmp_path: Path) -> None:
    """A worker behind a proxy is cut off past its lease; another takes the job over; when the link
    returns, the first worker's late result is discarded and its handler was told to stop."""
    parts = urlsplit(pg_url)
    with FaultProxy((parts.hostname or "127.0.0.1", parts.port or 5432)) as proxy:
        lease = 2.0
        # The cut-off worker, first, leads the maintenance: the other reaps its job once it has the lead,
        # within a leadership lease as short as the job's (the default 15 s was most of this test's time).
        leader_lease = ("--leader-lease-seconds", str(lease))
        cut_off = fleet.start(
            "--concurrency", "1", "--lease-seconds", str(lease), *leader_lease, url=_via(pg_url, proxy.port)
        )
        cut_off_id = cut_off.wait_started()
        store = make_store(pg_url)
        job = store.enqueue(
            NewJob(
                kind="probe",
                payload={"markers": str(tmp_path), "seconds": 60, "later_seconds": 0.5, "return_when_stopped": True},
                max_attempts=3,
            )
        )
        wait_until(lambda: markers(tmp_path, job.id, "start"), 20, what="the first worker to start the job")
        time.sleep(1.0)  # a heartbeat or two go through

        proxy.blackhole()
        blackholed_at = time.monotonic()
        other = fleet.start("--concurrency", "1", "--lease-seconds", str(lease), "--poll-seconds", "0.5", *leader_lease)
        other_id = other.wait_started()
        wait_until(lambda: pg.job(job.id)["state"] == "succeeded", 30, what="the other worker to take over")
        taken_over_after = time.monotonic() - blackholed_at
        assert store.get_result(job.id) == {"worker": other_id, "attempt": 2}
        assert not markers(tmp_path, job.id, "stopped"), "the cut-off worker cannot know yet"
        time.sleep(max(0.0, 2 * lease - taken_over_after))  # well past the lease

        proxy.resume()
        resumed_at = time.time()
        stopped = wait_until(lambda: markers(tmp_path, job.id, "stopped"), 20, what="the cut-off handler to be stopped")
        wait_until(lambda: cut_off.events("job.discarded"), 10, what="the late result to be discarded")
        print(
            f"\npartition: taken over {taken_over_after:.1f} s after the cut; the cut-off handler was told to "
            f"stop {stopped[0]['at'] - resumed_at:.2f} s after the link returned"
        )

        assert stopped[0]["reason"] == "lease_lost" and stopped[0]["worker"] == cut_off_id
        assert store.get_result(job.id) == {"worker": other_id, "attempt": 2}, "the late result must be discarded"
        assert [(a["worker"], a["outcome"]) for a in pg.attempts(job.id)] == [
            (cut_off_id, "lease_expired"),
            (other_id, "succeeded"),
        ]
        assert cut_off.events("job.lease_lost")
        assert not cut_off.events("job.succeeded")
        assert cut_off.alive() and other.alive()


def test_poison_job(fleet: Fleet, pg_url: str, make_store: Callable[..., Store], pg: Database) -> None:
    """A handler that kills its own process every time: after max_attempts the job fails with an error
    that says its lease expired that many times; the other jobs keep flowing meanwhile."""
    # Each death may be the leader's: a short leadership lease lets the next worker reap soon after
    # (with the default 15 s, up to three times 10-15 s of waiting).
    args = ("--concurrency", "2", "--lease-seconds", "2", "--poll-seconds", "0.5", "--leader-lease-seconds", "2")
    store = make_store(pg_url)
    poison = store.enqueue(NewJob(kind="poison", max_attempts=3))
    others = store.enqueue_many([NewJob(kind="sleep", payload={"seconds": 0.3}, max_attempts=10) for _ in range(30)])
    for _ in range(2):
        fleet.start(*args)

    deaths = 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        for worker in list(fleet):
            if not worker.alive() and not getattr(worker, "replaced", False):
                worker.replaced = True  # type: ignore[attr-defined]
                assert worker.proc.returncode == 17
                deaths += 1
                fleet.start(*args)
        if pg.job(poison.id)["state"] == "failed" and pg.count("jobs", "state = 'succeeded'") == len(others):
            break
        time.sleep(0.1)
    final = pg.job(poison.id)
    print(f"\npoison: {deaths} worker deaths; final error: {final['error']!r}")
    assert final["state"] == "failed"
    assert final["attempts"] == 3
    assert "lease expired 3 time(s)" in final["error"]
    assert [a["outcome"] for a in pg.attempts(poison.id)] == ["lease_expired"] * 3
    assert deaths == 3
    assert pg.count("jobs", "state = 'succeeded'") == len(others)
    assert pg.count("jobs", "state IN ('queued', 'running')") == 0
