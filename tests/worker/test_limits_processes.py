"""Limits and fairness with real worker processes, on both stores.

These are the races between processes: on PostgreSQL each claim is a separate session
under READ COMMITTED; on SQLite claims take turns under BEGIN IMMEDIATE, but the
processes still race for that lock, and finishes and reaps interleave with the claims.
SQLite runs smaller batches (``size``): its claims are serial and slower, and the
properties do not depend on the batch's size. The same semantics are checked claim by
claim in tests/store/test_limits.py.

Handlers record ``start|end attempt scope unix_time`` lines (tests/worker/limit_apps.py):
the overlaps are measured from the handlers' own view. The order of starts is the
database's (job_attempts.started_at: the claim's instant), not the handlers': a job
claimed just before another tenant's jobs were queued may start its handler after them.
"""

from __future__ import annotations

import signal
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.jobs import NewJob
from service.limits import Limit
from service.store import Store
from tests.conftest import Database
from tests.worker.harness import Fleet, WorkerProcess, wait_until

pytestmark = pytest.mark.slow

APP = "tests.worker.limit_apps"


@pytest.fixture
def fleet(store_url: str, tmp_path: Path):
    workers = Fleet(store_url, tmp_path)
    yield workers
    workers.stop_all()


def size(db: Database, postgres: int, sqlite: int) -> int:
    return sqlite if db.dialect == "sqlite" else postgres


def start_workers(fleet: Fleet, count: int, *args: str) -> None:
    started = [fleet.start("--app", APP, *args) for _ in range(count)]
    for worker in started:
        worker.wait_started(60)


def span_jobs(log: Path, tenant: str, count: int, seconds: float) -> list[NewJob]:
    payload = {"log": str(log), "scope": f"tenant:{tenant}", "seconds": seconds}
    return [NewJob(kind="span", payload=payload, tenant=tenant) for _ in range(count)]


def records(log: Path) -> list[tuple[str, str, str, float]]:
    if not log.exists():
        return []
    rows = []
    for line in log.read_text().splitlines():
        what, job, scope, at = line.split()
        rows.append((what, job, scope, float(at)))
    return rows


def database_clock(db: Database) -> datetime:
    """The database's clock now (the clock claims stamp started_at with)."""
    if db.dialect == "sqlite":
        return datetime.fromisoformat(db.scalar("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now') AS t")).replace(tzinfo=UTC)
    return db.scalar("SELECT clock_timestamp() AS t")


def starts_in_claim_order(db: Database) -> list[tuple[datetime, str]]:
    """Every attempt's start and tenant, in the order the claims took them."""
    rows = db.rows("SELECT a.started_at, a.job_id, j.tenant FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id")
    return [(r["started_at"], r["tenant"]) for r in sorted(rows, key=lambda r: (r["started_at"], r["job_id"]))]


def busiest(fleet: Fleet, db: Database) -> WorkerProcess | None:
    """The live worker holding the most running jobs (None when none holds any)."""
    holding = Counter(r["lease_owner"] for r in db.rows("SELECT lease_owner FROM jobs WHERE state = 'running'"))
    alive = [w for w in fleet.alive() if holding[w.worker_id]]
    return max(alive, key=lambda w: holding[w.worker_id], default=None)


def max_overlap(log: Path, db: Database) -> dict[str, int]:
    """Per scope, the most attempts holding a slot at one instant (a start after an end at the same
    instant). A handler killed with its worker logged no end: its slot was held until the reaper
    ended the attempt, so its end is the attempt's finished_at (the same host's clock)."""
    events = defaultdict(list)
    rows = records(log)
    ended = {attempt for what, attempt, _s, _a in rows if what == "end"}
    reaped = {
        f"{r['job_id']}:{r['attempt']}": r["finished_at"].timestamp()
        for r in db.rows("SELECT job_id, attempt, finished_at FROM job_attempts WHERE outcome = 'lease_expired'")
    }
    for what, attempt, scope, at in rows:
        events[scope].append((at, 1 if what == "start" else -1))
        if what == "start" and attempt not in ended:
            events[scope].append((reaped[attempt], -1))
    peaks = {}
    for scope, points in events.items():
        running = peak = 0
        for _at, step in sorted(points, key=lambda p: (p[0], p[1])):
            running += step
            peak = max(peak, running)
        peaks[scope] = peak
    return peaks


def test_keys_never_run_over_their_limit_reach_it_and_slots_survive_sigkill(
    make_store, store_url: str, fleet: Fleet, db: Database, tmp_path: Path
):
    """4 workers at concurrency 10 over short jobs on 5 keys limited to 3 each (the issue asks
    2,000 jobs: 1,000 on PostgreSQL, 500 on SQLite, for the suite's time), one worker SIGKILLed
    (and another started) every 2 s, three times, the one holding the most jobs: the most handlers of a key ever running at
    once is exactly 3, every job succeeds, and every counter ends at the running jobs it counts
    (none). A killed worker's slots come back when the reaper reclaims its leases (2 s leases).

    Each job runs 50 ms, ten times what a claim and a finish cost here, so a held slot is mostly
    a running handler: with 5 ms jobs most of a slot's time was the claim and the finish around
    the handler, three handlers of a key were seldom inside their 5 ms at once, and one key was
    once seen peaking at 2 on a loaded machine (CI, 2 Dec) although its counter was full."""
    store: Store = make_store(store_url)
    log = tmp_path / "spans.log"
    total = size(db, postgres=1_000, sqlite=500)
    for key in range(5):
        store.set_limit(Limit(f"key:k{key}", concurrency=3))
    # The busiest worker killed may lead the maintenance: the reaper then waits for the next leader,
    # within a leadership lease as short as the jobs' (the default 15 s, up to three times).
    args = ("--concurrency", "10", "--lease-seconds", "2", "--poll-seconds", "0.2", "--grace-seconds", "1",
            "--leader-lease-seconds", "2")  # fmt: skip
    start_workers(fleet, 4, *args)
    for first in range(0, total, 500):
        store.enqueue_many(
            [
                NewJob(
                    kind="span",
                    payload={"log": str(log), "scope": f"key:k{n % 5}", "seconds": 0.05},
                    concurrency_key=f"k{n % 5}",
                    max_attempts=10,
                )
                for n in range(first, first + 500)
            ]
        )

    deadline = time.monotonic() + 120
    kills = 0
    time.sleep(1)
    while (done := db.count("jobs", "state = 'succeeded'")) < total:
        assert time.monotonic() < deadline, f"{done} of {total} done"
        victim = busiest(fleet, db)
        if victim is not None and kills < 3:
            victim.signal(signal.SIGKILL)
            victim.proc.wait(10)
            kills += 1
            fleet.start("--app", APP, *args)
        time.sleep(2)

    assert kills >= 1
    overlap = max_overlap(log, db)
    assert overlap == {f"key:k{key}": 3 for key in range(5)}, f"over the limit, or the limit idled slots: {overlap}"
    assert db.count("jobs", "state <> 'succeeded'") == 0
    assert db.count("job_attempts", "outcome = 'lease_expired'") >= 1, "no kill ever hit a running job"
    usage = {u.scope: u.running for u in store.scope_usage()}
    assert usage == {f"key:k{key}": 0 for key in range(5)}, "a slot leaked"


def test_a_late_tenant_starts_all_its_jobs_within_the_next_40_starts(
    make_store, store_url: str, fleet: Fleet, db: Database, tmp_path: Path
):
    """Tenant a queues 5,000 jobs; once they fill every slot, b queues 20: b's first job is the
    next start and all 20 are among the next 40, with 2 workers. The next starts are counted in
    the database's order from the instant b's jobs were committed: a's jobs claimed before then
    are not held against the claim, even when their handlers started after b's enqueue (six of
    them did in CI on 2 Dec, when starts were counted by the handlers' clock).

    A tenant's share is of slots (a job's virtual time counts its tenant's running jobs), so b
    takes every slot that frees until it runs as many jobs as a, then half of the starts; the
    jobs hold their slots a while (0.5 s) so that "running" means it. 40 starts for 20 jobs is
    exactly half, so the test needs b's catching up to cover its jobs: 2 workers of 20 slots,
    b's half is 20, and its 20th start came 20th in 11 of 11 runs (both stores). With 2 workers
    of 10 it came 30th (26th to 38th in 20 runs), of 4 34th to 40th (30 runs), and with jobs
    of 0 s, which leave nothing running to catch up against, 34th to 43rd: half the starts,
    give or take a claim, which is what failed in CI. The claim shares slots; it does not give
    a late tenant more than half of them, so "within 40" holds with margin only when b's jobs
    fit in its half.
    """
    store: Store = make_store(store_url)
    log = tmp_path / "spans.log"
    start_workers(fleet, 2, "--concurrency", "20", "--poll-seconds", "0.2")
    for _ in range(5):
        store.enqueue_many(span_jobs(log, "a", 1_000, seconds=0.5))
    wait_until(lambda: db.count("jobs", "state = 'succeeded'") >= 80, 30, what="tenant a to fill the slots")

    store.enqueue_many(span_jobs(log, "b", 20, seconds=0.5))
    visible = database_clock(db)  # b's jobs are committed: every claim from now on sees them
    wait_until(lambda: db.count("jobs", "tenant = 'b' AND state = 'succeeded'") == 20, 60, what="b's jobs")

    # b's jobs that a claim in flight took count first (a's jobs those claims took do not);
    # one claim's jobs start at one instant, b's counted first among them.
    starts = sorted(starts_in_claim_order(db), key=lambda start: (start[0], start[1] != "b"))
    after = [tenant for at, tenant in starts if at < visible and tenant == "b"]
    after += [tenant for at, tenant in starts if at >= visible]
    assert after[0] == "b", f"b, with nothing running, did not go first: {''.join(after[:60])}"
    assert after[:40].count("b") == 20, f"b's jobs were not all among the next 40 starts: {''.join(after[:60])}"


def test_weights_split_the_starts_3_to_1(make_store, store_url: str, fleet: Fleet, db: Database, tmp_path: Path):
    """Tenant heavy (weight 3) and light (weight 1) queue 500 jobs each in one batch: of the
    first 400 starts, heavy has 3/4 within ±10 %.

    A weight splits slots (a job's virtual time counts its tenant's running jobs), so heavy
    holds 6 of the 8 slots and, its jobs taking as long as light's, makes 3/4 of the starts.
    The jobs hold their slots a while (0.1 s) so that "running" means it: with jobs of 0 s
    nothing is running when a freed slot is claimed, every claim of one slot goes to heavy,
    and the share of starts followed the sizes of the claims (heavy made 52 % to 97 % of
    them on SQLite, failing one run in five)."""
    store: Store = make_store(store_url)
    log = tmp_path / "spans.log"
    counted = 400
    store.set_limit(Limit("tenant:heavy", weight=3))
    start_workers(fleet, 2, "--concurrency", "4", "--poll-seconds", "0.2")
    store.enqueue_many(span_jobs(log, "heavy", 500, seconds=0.1) + span_jobs(log, "light", 500, seconds=0.1))

    wait_until(lambda: db.count("job_attempts") >= counted, 120, what=f"{counted} starts")
    share = Counter(tenant for _at, tenant in starts_in_claim_order(db)[:counted])
    assert 0.675 * counted <= share["heavy"] <= 0.825 * counted, f"heavy:light = {share} (3:1 expected)"


def test_a_rate_limit_holds_starts_to_20_a_second(
    make_store, store_url: str, fleet: Fleet, db: Database, tmp_path: Path
):
    store: Store = make_store(store_url)
    log = tmp_path / "calls.log"
    store.set_limit(Limit("kind:call_model", rate=20, per_seconds=1.0))
    start_workers(fleet, 4, "--concurrency", "10", "--poll-seconds", "0.05")
    store.enqueue_many([NewJob(kind="call_model", payload={"log": str(log)}) for _ in range(300)])

    wait_until(lambda: len(records(log)) >= 240, 60, what="12 s of starts")
    # Per second of the database's clock, which the rate windows follow: a job claimed at the
    # end of one window may start its handler in the next (by the handlers' clock one second
    # once had 30 starts, 2 Dec).
    seconds = Counter(int(at.timestamp()) for at, _tenant in starts_in_claim_order(db))
    first = min(seconds)
    window = [seconds[second] for second in range(first + 1, first + 11)]  # 10 whole seconds after the first
    assert all(18 <= count <= 22 for count in window), f"starts per second: {window}"
