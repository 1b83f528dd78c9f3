"""The maintenance leadership across real ``jobq worker`` processes (issue 24): one worker of the
fleet at a time reaps, fires schedules, folds the rollup and prunes; a killed leader is replaced
within its lease, and a stopped one writes nothing once its lease is lost.

The workers log each duty they run at debug level (``maintenance.ran``: worker, duty, seconds);
the tests read who ran what, and when, from those lines, and the rest from the database.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from service.config import Settings
from service.errors import LeadershipLost
from service.jobs import NewJob
from service.retry import RetryPolicy
from service.schedules import ScheduleSpec
from service.store import Store, open_store
from service.store.base import MAINTENANCE, LeaderLease
from tests.conftest import Database
from tests.worker.harness import ONE_FLEET_AT_A_TIME, Fleet, WorkerProcess, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres_only(reason="a fleet of processes on one PostgreSQL"),
    ONE_FLEET_AT_A_TIME,
]

FLEET_DUTIES = {"reap", "schedule", "rollup", "retention", "rollup_retention"}
LEADER_LEASE = 3.0
SLACK = 5.0  # issue 24: "within the leadership lease + 5 s"


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    opened = open_store(Settings(database_url=pg_url))
    yield opened
    opened.close()


def start(fleet: Fleet, count: int, *extra: str) -> list[WorkerProcess]:
    args = ["--concurrency", "1", "--lease-seconds", "2", "--grace-seconds", "1",
            "--leader-lease-seconds", str(LEADER_LEASE), "--log-level", "debug", *extra]  # fmt: skip
    workers = [fleet.start(*args) for _ in range(count)]
    for worker in workers:
        worker.wait_started(60)
    return workers


def leader(pg: Database) -> dict[str, Any] | None:
    rows = pg.rows("SELECT owner, term FROM leaders WHERE name = %(name)s AND expires_at > now()", name=MAINTENANCE)
    return rows[0] if rows else None


def by_id(workers: list[WorkerProcess], worker_id: str) -> WorkerProcess:
    return next(w for w in workers if w.worker_id == worker_id)


def at(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["ts"])


def fleet_runs(workers: list[WorkerProcess]) -> list[tuple[datetime, datetime, str, str]]:
    """Every fleet duty any worker ran: (began, ended, worker, duty), in order of beginning."""
    runs = []
    for worker in workers:
        for event in worker.events("maintenance.ran"):
            if event["duty"] in FLEET_DUTIES:
                ended = at(event)
                runs.append((ended - timedelta(seconds=event["s"]), ended, event["worker"], event["duty"]))
    return sorted(runs)


def every_second_schedule(store: Store) -> None:
    """A schedule that fires every second, into a queue no worker claims: its jobs stay, one per tick."""
    spec = ScheduleSpec(name="tick", cron="* * * * * *", kind="tick", queue="ticks")
    store.save_schedule(spec, store.database_now())


def test_one_worker_at_a_time_runs_the_fleet_duties_and_a_killed_leader_is_replaced_within_its_lease(
    fleet: Fleet, pg: Database, store: Store
) -> None:
    every_second_schedule(store)
    workers = start(fleet, 10)
    first = wait_until(lambda: leader(pg), LEADER_LEASE + SLACK, what="a leader")
    # Every worker holds a long job, the leader too: its job must be reaped by the next leader.
    store.enqueue_many([NewJob(kind="probe", payload={"seconds": 600, "markers": str(fleet.log_dir)})
                        for _ in workers])  # fmt: skip
    wait_until(lambda: pg.count("jobs", "state = 'running'") == len(workers), 30, what="every worker to run a job")
    time.sleep(12)  # the fleet as it runs: one leader, duties due all the time

    old = by_id(workers, first["owner"])
    held = pg.scalar("SELECT id FROM jobs WHERE lease_owner = %(owner)s AND state = 'running'", owner=old.worker_id)
    killed_at = pg.scalar("SELECT now()")
    killed_here = datetime.now(UTC)  # the clock the workers' log lines are stamped with
    old.kill()

    new = wait_until(lambda: (row := leader(pg)) and row["owner"] != old.worker_id and row, LEADER_LEASE + SLACK,
                     interval=0.1, what="another worker to take the lead")  # fmt: skip
    assert new["term"] == first["term"] + 1
    reaped_at = wait_until(
        lambda: pg.scalar("SELECT max(finished_at) FROM job_attempts WHERE job_id = %(id)s AND outcome = 'lease_expired'",
                          id=held),
        LEADER_LEASE + SLACK, interval=0.1, what="the dead leader's job to be reaped",
    )  # fmt: skip
    ticked_at = wait_until(
        lambda: pg.scalar("SELECT min(created_at) FROM jobs WHERE queue = 'ticks' AND created_at > %(t)s", t=killed_at),
        LEADER_LEASE + SLACK, interval=0.1, what="the next tick to be fired",
    )  # fmt: skip
    time.sleep(10)  # and the new leader leads on
    for worker in fleet.alive():
        worker.terminate()
    for worker in workers:
        worker.wait(30)

    print(f"\nleader killed: the lead taken {new['term']}, job reaped {(reaped_at - killed_at).total_seconds():.1f} s "
          f"and the next tick fired {(ticked_at - killed_at).total_seconds():.1f} s after the kill")  # fmt: skip
    assert (reaped_at - killed_at).total_seconds() <= LEADER_LEASE + SLACK
    assert (ticked_at - killed_at).total_seconds() <= LEADER_LEASE + SLACK
    # Only the leaders ran fleet duties, never two workers at once, and the duties changed hands
    # as often as the lead did.
    runs = fleet_runs(workers)
    assert {duty for *_, duty in runs} >= {"reap", "schedule", "rollup"}
    for (_, ended, worker, _), (began, _, other, _) in zip(runs, runs[1:], strict=False):
        assert worker == other or ended <= began, f"{worker} and {other} ran fleet duties at once"
    hands = [worker for _, _, worker, _ in runs]
    changes = sum(1 for a, b in zip(hands, hands[1:], strict=False) if a != b)
    gained = sum(len(w.events("leadership.gained")) for w in workers)
    assert changes <= gained - 1
    # The leader we killed had run duties, the one that took over ran duties after. (Others
    # may have led in between or since: a lease renewal late under load hands the lead on, counted
    # above; CI on 3 Dec saw a third worker lead after the takeover.)
    assert any(worker == old.worker_id for began, _, worker, _ in runs if began < killed_here)
    assert all(worker != old.worker_id for began, _, worker, _ in runs if began > killed_here)
    assert any(worker == new["owner"] for began, _, worker, _ in runs if began > killed_here)
    # One job per tick, fleet-wide, through the takeover: no tick twice, none since lost for good.
    ticks = pg.scalar("SELECT count(*) FROM jobs WHERE queue = 'ticks'")
    assert ticks == pg.scalar("SELECT count(DISTINCT idempotency_key) FROM jobs WHERE queue = 'ticks'")


def test_a_stopped_leader_writes_nothing_once_its_lease_is_lost(fleet: Fleet, pg: Database, store: Store) -> None:
    every_second_schedule(store)
    first = start(fleet, 1)[0]
    held = wait_until(lambda: leader(pg), LEADER_LEASE + SLACK, what="the first worker to lead")
    assert held["owner"] == first.worker_id
    second = start(fleet, 1)[0]

    first.signal(signal.SIGSTOP)  # partitioned away: it runs no code, its lease runs out
    stopped = time.monotonic()
    taken = wait_until(lambda: (row := leader(pg)) and row["owner"] == second.worker_id and row,
                       LEADER_LEASE + SLACK, interval=0.1, what="the second worker to take the lead")  # fmt: skip
    took = time.monotonic() - stopped
    time.sleep(1)
    # Its token, as it held it, is refused by the store: the fence, whatever the process does next.
    stale = LeaderLease(MAINTENANCE, first.worker_id, held["term"], datetime.now(UTC), datetime.now(UTC))
    with pytest.raises(LeadershipLost):
        store.reap(RetryPolicy().delays_by_attempt(), leader=stale)

    resumed = datetime.now(UTC)
    first.signal(signal.SIGCONT)
    time.sleep(5)  # its maintenance thread wakes with duties overdue
    for worker in (first, second):
        worker.terminate()
        worker.wait(30)

    print(f"\nstopped leader: the lead taken {took:.1f} s after SIGSTOP (lease {LEADER_LEASE:g} s)")
    assert took <= LEADER_LEASE + SLACK
    assert taken["term"] == held["term"] + 1
    after = [run for run in fleet_runs([first]) if run[0] >= resumed]
    assert after == [], f"the deposed leader ran fleet duties after it resumed: {after}"
    assert first.events("leadership.lost"), "the deposed leader says it lost the lead"
    assert any(run[0] >= resumed for run in fleet_runs([second]))  # the new leader went on
