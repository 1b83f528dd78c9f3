"""A fleet on three hosts: Linux network namespaces on a bridge, real ``jobq worker`` processes
(two per host, each host with its own hostname), PostgreSQL reached through a TCP relay on the
bridge (the shared server's configuration is never touched), the API on one host and a client
on another. Needs root and ``ip``; skips elsewhere, saying so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from service.jobs import NewJob
from service.store import Store
from tests.conftest import Database
from tests.deploy.netns import Host, Hosts
from tests.worker.harness import ONE_FLEET_AT_A_TIME, ROOT, Fleet, WorkerProcess, wait_until
from tests.worker.proxy import FaultProxy

pytestmark = [pytest.mark.slow, ONE_FLEET_AT_A_TIME]

LEASE = 2.0
WORKER_ARGS = ("--concurrency", "3", "--lease-seconds", str(LEASE), "--poll-seconds", "0.5", "--grace-seconds", "1")
SLOTS = 3 * 2 * 3  # concurrency x workers per host x hosts
API_PORT = 8000


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    with Hosts(3) as made:
        yield made
    assert not made.leftovers(), "every namespace and link this test made is gone"


@pytest.fixture
def pg(pg_url: str) -> Iterator[Database]:
    database = Database(pg_url)
    database.execute("CREATE TABLE side_effects (job_id uuid PRIMARY KEY, worker text NOT NULL)")
    database.execute("CREATE TABLE side_effect_runs (job_id uuid NOT NULL, worker text NOT NULL, attempt int NOT NULL)")
    yield database
    database.close()


@pytest.fixture
def relay_url(pg_url: str, hosts: Hosts) -> Iterator[str]:
    """The test database, as the hosts reach it: a relay on the bridge's root-side address."""
    url = make_url(pg_url)
    with FaultProxy((url.host or "127.0.0.1", url.port or 5432), host=hosts.gateway) as relay:
        yield url.set(host=hosts.gateway, port=relay.port).render_as_string(hide_password=False)


@pytest.fixture
def fleet(relay_url: str, tmp_path: Path) -> Iterator[Fleet]:
    """Worker processes that reach the database through the relay; all killed when the test ends."""
    with Fleet(relay_url, tmp_path) as group:
        yield group


@pytest.fixture
def api(hosts: Hosts, relay_url: str, tmp_path: Path) -> Iterator[str]:
    """``jobq serve`` on host 0's own address; answers its base URL."""
    log = open(tmp_path / "api.log", "wb")
    command = [
        *hosts[0].run(),
        sys.executable,
        "-m",
        "service",
        "--database-url",
        relay_url,
        "serve",
        "--host",
        hosts[0].address,
        "--port",
        str(API_PORT),
        "--log-level",
        "warning",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("JOBQ_DATABASE_URL", None)
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        yield f"http://{hosts[0].address}:{API_PORT}"
    finally:
        proc.kill()
        proc.wait(10)
        log.close()


def in_namespace(host: Host, code: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*host.run(), sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


CLIENT = """
import json
from service.client import Client
with Client() as jobq:  # JOBQ_URL, JOBQ_TOKEN
    job = jobq.submit("side_effect", {"sleep": 0.05})
    done = jobq.wait(job.id, timeout=30)
    print(json.dumps({"job_id": str(job.id), "state": str(done.state), "result": jobq.result(job.id)}))
"""


def succeeded_by(pg: Database, workers: set[str], job_ids: list[str] | None = None) -> int:
    rows = pg.rows("SELECT job_id, worker FROM job_attempts WHERE outcome = 'succeeded'")
    return sum(1 for r in rows if r["worker"] in workers and (job_ids is None or r["job_id"] in job_ids))


def enqueue(store: Store, count: int, sleep: float) -> list[str]:
    jobs = store.enqueue_many(
        [NewJob(kind="side_effect", payload={"sleep": sleep}, max_attempts=10) for _ in range(count)]
    )
    return [str(j.id) for j in jobs]


def test_fleet_on_three_hosts(
    hosts: Hosts,
    fleet: Fleet,
    api: str,
    relay_url: str,
    pg_url: str,
    pg: Database,
    make_store: Callable[..., Store],
    tmp_path: Path,
) -> None:
    began = time.monotonic()
    env = {"JOBQ_SIDE_EFFECT_URL": relay_url}
    on: dict[str, list[WorkerProcess]] = {h.hostname: [] for h in hosts}
    for host in hosts:
        for _ in range(2):
            on[host.hostname].append(fleet.start(*WORKER_ARGS, env=env, prefix=host.run()))
    ids = {name: {w.wait_started(30) for w in workers} for name, workers in on.items()}
    store = make_store(pg_url)

    # -- 1. 300 jobs: every host's workers take some; the workers table shows three hosts -------
    first = enqueue(store, 300, 0.05)
    wait_until(lambda: pg.count("jobs", "state = 'succeeded'") == 300, 60, interval=0.2, what="300 jobs")
    assert {r["host"] for r in pg.rows("SELECT DISTINCT host FROM workers")} == set(on)
    per_host = {name: succeeded_by(pg, workers, first) for name, workers in ids.items()}
    assert all(per_host.values()), f"jobs done per host: {per_host}"

    # -- 2. the API on host 0, a client on host 1: submit and poll over the bridge ---------------
    token = subprocess.run(
        [sys.executable, "-m", "service", "--database-url", pg_url, "token", "create", "--tenant", "acme"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
    ).stdout.strip()
    wait_until(
        lambda: (
            in_namespace(hosts[1], f"import httpx; httpx.get('{api}/readyz').raise_for_status()", {}, 30).returncode
            == 0
        ),
        30,
        interval=0.5,
        what="the API to be ready",
    )
    client = in_namespace(hosts[1], CLIENT, {"JOBQ_URL": api, "JOBQ_TOKEN": token})
    assert client.returncode == 0, client.stderr[-3000:]
    answer = json.loads(client.stdout)
    assert answer["state"] == "succeeded"
    assert answer["result"]["worker"] in set().union(*ids.values())

    # -- 3. host 2 cut off while it runs jobs ----------------------------------------------------
    cut, cut_ids = hosts[2], ids[hosts[2].hostname]
    second = enqueue(store, SLOTS, 2.0)  # one per slot: every worker holds three
    wait_until(lambda: pg.count("jobs", "state = 'running'") == SLOTS, 20, interval=0.02, what="all slots busy")
    held = [
        r["id"]
        for r in pg.rows("SELECT id, lease_owner FROM jobs WHERE state = 'running'")
        if r["lease_owner"] in cut_ids
    ]
    cut.cut()
    cut_at = time.monotonic()
    try:
        assert len(held) == 6, "the cut host's two workers hold three jobs each"
        # Reclaimed after the lease by the other hosts, and finished there.
        wait_until(
            lambda: pg.count("jobs", "state = 'succeeded' AND id = ANY(%(ids)s)", ids=held) == len(held),
            40,
            interval=0.2,
            what="the cut host's jobs to finish elsewhere",
        )
        taken_over = time.monotonic() - cut_at
        assert taken_over > LEASE, "nothing is taken over before the lease runs out"
    finally:
        cut.heal()
    healed_at = time.monotonic()

    # Back on the network: its late writes are refused (fenced) and it says so.
    cut_workers = on[cut.hostname]

    def lost() -> set[str]:
        return {e["job_id"] for w in cut_workers for e in w.events("job.lease_lost")}

    wait_until(lambda: set(held) <= lost(), 40, interval=0.2, what="job.lease_lost for every cut-off job")
    told = time.monotonic() - healed_at
    for job_id in held:
        attempts = [(a["worker"] in cut_ids, a["outcome"]) for a in pg.attempts(job_id)]
        assert attempts == [(True, "lease_expired"), (False, "succeeded")], attempts
        assert store.get_result(job_id)["worker"] not in cut_ids, "the late result must be discarded"
    assert not {e["job_id"] for w in cut_workers for e in w.events("job.succeeded")} & set(held)
    assert all(w.alive() for w in fleet)

    # It rejoins: both of its workers take new jobs (fed until they do, bounded).
    third: list[str] = []
    deadline = time.monotonic() + 30
    while not all(succeeded_by(pg, {w.worker_id}, third) for w in cut_workers):
        assert time.monotonic() < deadline, "the cut-off workers never took new jobs"
        third += enqueue(store, SLOTS, 0.2)
        time.sleep(0.5)

    # -- no job lost, none run to completion twice -------------------------------------------------
    total = len(first) + 1 + len(second) + len(third)
    wait_until(lambda: pg.count("jobs", "state = 'succeeded'") == total, 60, interval=0.2, what="every job")
    assert pg.count("jobs") == total
    assert pg.count("job_attempts", "outcome = 'succeeded'") == total
    assert pg.count("job_attempts", "outcome IS NULL") == 0
    assert pg.count("side_effects") == total, "the idempotent side effect happened once per job"
    print(
        f"\nmultihost: 3 hosts x 2 workers; {per_host} of the first 300 jobs per host; the cut host's "
        f"{len(held)} jobs finished elsewhere {taken_over:.1f} s after the cut; lease_lost for all "
        f"{told:.1f} s after the link came back; {len(third)} jobs fed until it rejoined; "
        f"{time.monotonic() - began:.1f} s in all"
    )
