"""Every bench runs once at a tiny size and prints its results: a smoke run, never a timing.

No assertion here is about speed; the figures at these sizes mean nothing.
They only prove that ``python -m bench NAME`` still works end to end.
"""

from __future__ import annotations

import json
import shutil

import pytest

from bench.__main__ import NAMES, main
from tests.conftest import PostgresServer

TINY = {
    "enqueue": ["--jobs", "20", "--batch", "10"],
    "drain": ["--jobs", "40", "--cases", "1x4", "--pgbench-seconds", "1" if shutil.which("pgbench") else "0"],
    "pickup": ["--trials", "3", "--sqlite-default-trials", "1"],
    "poll": ["--clients", "2", "--seconds", "0.5", "--jobs", "5", "--auth", "on"],
    "submit": ["--clients", "2", "--seconds", "0.5", "--rounds", "1", "--keys"],
    "scale": ["--history", "500", "--churn", "300", "--trials", "5", "--queued", "20"],
    "cost": [
        "--jobs",
        "30",
        "--concurrency",
        "2",
        "--enqueue",
        "batch",
        "--connection-jobs",
        "4",
        "--items",
        "40",
        "--item-seconds",
        "0",
    ],
    "claim": ["--queued", "200", "--tenants", "1,20", "--claims", "5", "--limit", "3"],
    "drain_limited": [
        "--jobs",
        "60",
        "--cases",
        "1x4",
        "--pgbench-seconds",
        "0",
        "--tenants",
        "10",
        "--limit",
        "2",
        "--weighted",
    ],
    "console": ["--history", "500", "--trials", "2", "--queued", "30"],
    "reap": [
        "--running",
        "0,5",
        "--churn",
        "20",
        "--trials",
        "3",
        "--crash-trials",
        "1",
        "--lease-seconds",
        "2",
        "--leader-lease-seconds",
        "2",
    ],
    "history": [
        "--jobs",
        "3000",
        "--trials",
        "5",
        "--queued",
        "20",
        "--runs",
        "1",
        "--pgbench-seconds",
        "0",
        "--prunes",
        "100:0,50:0.01",
        "--retention-workers",
        "1",
        "--retention-seconds",
        "2",
    ],
    "fleet": [
        "--workers",
        "2",
        "--pooler",
        "none,pgbouncer",
        "--idle-seconds",
        "1",
        "--warmup-seconds",
        "0",
        "--jobs",
        "20",
        "--pickup-trials",
        "2",
    ],
    "workflows": ["--jobs", "12", "--layers", "3", "--width", "4", "--fan", "2", "--chain", "4", "--processes", "1"],
    "bloat": [
        "--warmup-seconds",
        "0.5",
        "--rate",
        "40",
        "--slots",
        "2",
        "--workers",
        "1",
        "--clean-seconds",
        "1",
        "--pinned-seconds",
        "1",
        "--recovery-seconds",
        "1",
        "--high-seconds",
        "0.5",
        "--readers-seconds",
        "1",
        "--reader-query-seconds",
        "0.5",
        "--autovacuum",
        "on",
        "--explain",
    ],
    "compare": ["--jobs", "20", "--rounds", "1", "--cases", "1x2", "--enqueue-jobs", "10", "--pgbench-seconds", "0"],
}
NEEDS = {"compare": "pgqueuer"}  # the bench extra, which CI does not install


@pytest.mark.parametrize("name", [*NAMES, "drain_limited"])
def test_bench_runs_at_a_tiny_size(
    name: str, postgres_server: PostgresServer, capsys: pytest.CaptureFixture[str]
) -> None:
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    bench = name.removesuffix("_limited")
    code = main(
        [bench, "--database-url", postgres_server.admin_url, "--repeat", "1", "--settle-seconds", "0", *TINY[name]]
    )
    assert code == 0
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert lines and all(line["bench"] == bench for line in lines)
    assert f"== {bench} ==" in out  # the readable table follows the JSON lines


def test_every_bench_has_a_smoke_run() -> None:
    assert set(TINY) == {*NAMES, "drain_limited"}
