"""Fixtures of the operations tests: the CLI (in this process, or as a real process), the API,
a real worker, seeding.

``cli(*args)`` runs the ``jobq`` entry point (:func:`service.cli.main`, exit codes
and all) in this process: a process costs a second or more of imports on a busy
machine, so most tests use it; the end-to-end tests use ``run(*args)``, the
installed console script, as tests/cli does.

Jobs are seeded through a store on the real database clock (not a pinned one),
because the CLI measures its windows (``--since 24h``) from now; "old" history
is made by moving ``finished_at`` back with :func:`backdate`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from service.jobs import ClaimedJob, Completion, JobStatus, NewJob
from service.store import Store
from tests.api.conftest import LiveApi, start_api  # noqa: F401  (fixture)
from tests.cli.test_cli import jobq
from tests.conftest import Database
from tests.store.builders import fail_job
from tests.worker.harness import WorkerProcess

Run = Callable[..., subprocess.CompletedProcess[str]]
OPS_APP = "tests.ops.apps"


@pytest.fixture
def cli(store_url: str, capsys: pytest.CaptureFixture[str]) -> Run:
    """``cli(*args)``: ``jobq --database-url URL args…`` in this process; answers like ``run``."""

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()  # drop what came before
        with pytest.raises(SystemExit) as exited:
            main(["--database-url", store_url, *args])
        out = capsys.readouterr()
        code = exited.value.code
        return subprocess.CompletedProcess(list(args), code if isinstance(code, int) else 0, out.out, out.err)

    return cli


@pytest.fixture
def run(store_url: str, tmp_path: Path) -> Run:
    """``run(*args)``: the real ``jobq`` against this test's database."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        result: subprocess.CompletedProcess[str] = jobq(*args, url=store_url, cwd=tmp_path, env=env)
        return result

    return run


@pytest.fixture
def live(make_store: Callable[..., Store], store_url: str) -> Store:
    """A store on the database clock, for seeding what the CLI then reads."""
    return make_store(store_url)


@pytest.fixture
def api(start_api: Callable[..., LiveApi], store_url: str) -> LiveApi:  # noqa: F811
    return start_api(store_url)


@pytest.fixture
def worker(store_url: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """``worker(*args)``: ``jobq worker --app tests.ops.apps`` on this test's database, stopped after it."""
    started: list[WorkerProcess] = []

    def start(*args: str) -> WorkerProcess:
        process = WorkerProcess(
            store_url, tmp_path, f"worker{len(started)}", ["--poll-seconds", "0.2", *args], app=OPS_APP
        )
        started.append(process)
        process.wait_started()
        return process

    yield start
    for process in started:
        process.terminate()
    for process in started:
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()


def claim_all(store: Store, kind: str, queue: str = "default", limit: int = 500) -> list[ClaimedJob]:
    return store.claim("seeder", [queue], limit, 60, kinds=[kind])


def fail_jobs(store: Store, kind: str, errors: list[str], *, queue: str = "default", tenant: str = "default",
              ) -> list[JobStatus]:  # fmt: skip
    """One job per error, failed for good with that error."""
    jobs = store.enqueue_many(
        [NewJob(kind=kind, queue=queue, tenant=tenant, max_attempts=1, payload={"n": i}) for i in range(len(errors))]
    )
    claimed = {c.id: c for c in claim_all(store, kind, queue)}
    for job, error in zip(jobs, errors, strict=True):
        fail_job(store, claimed[job.id], error, retryable=False)
    return jobs


def succeed_jobs(store: Store, kind: str, count: int, *, queue: str = "default", tenant: str = "default",
                 ) -> list[JobStatus]:  # fmt: skip
    jobs = store.enqueue_many([NewJob(kind=kind, queue=queue, tenant=tenant) for _ in range(count)])
    for _ in range(0, count, 500):
        lost = store.complete_many([Completion(c.lease, {"ok": True}) for c in claim_all(store, kind, queue)])
        assert not lost
    return jobs


def cancel_job(store: Store, kind: str, *, tenant: str = "default") -> JobStatus:
    job = store.enqueue(NewJob(kind=kind, tenant=tenant))
    return store.cancel(job.id)


def traceback(line: str) -> str:
    return f'Traceback (most recent call last):\n  File "handler.py", line 12, in run\n    parse(row)\n{line}\n'


def db_time(db: Database, moment: datetime) -> Any:
    """``moment`` as a parameter the test database compares with its timestamps."""
    if db.dialect == "sqlite":
        utc = moment.astimezone(UTC)
        return utc.strftime("%Y-%m-%d %H:%M:%S.") + f"{utc.microsecond // 1000:03d}"
    return moment


def backdate(db: Database, days: float, where: str, *, table: str = "jobs", column: str = "finished_at",
             **params: Any) -> None:  # fmt: skip
    """Set ``column`` (``finished_at`` of jobs by default) of the rows ``where`` picks to
    ``days`` ago, on either store. Table and column names are the tests' own, never input."""
    moment = db_time(db, datetime.now(UTC) - timedelta(days=days))
    db.execute(f"UPDATE {table} SET {column} = %(moment)s WHERE {where}", moment=moment, **params)
