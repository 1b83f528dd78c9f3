"""A real `jobq worker --metrics-port` serves its own /metrics: the jobs it ran, by outcome, their
run times, its heartbeats, its leadership and whether the database answers it. Off by default."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from service.jobs import JobState, NewJob
from service.store import Store
from tests.worker.harness import WorkerProcess, wait_until


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_worker_serves_the_jobs_it_ran_on_its_metrics_port(
    store_url: str, make_store: Callable[..., Store], tmp_path: Path
) -> None:
    store = make_store(store_url)
    port = free_port()
    worker = WorkerProcess(
        store_url,
        tmp_path,
        "metrics",
        ["--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--lease-seconds", "3", "--poll-seconds", "0.2"],
        app="service.examples",
    )
    try:
        worker.wait_started()
        quick = [store.enqueue(NewJob(kind="sleep", payload={"seconds": 0})) for _ in range(3)]
        slow = store.enqueue(NewJob(kind="sleep", payload={"seconds": 2.5}))  # renewed every second
        failing = store.enqueue(NewJob(kind="fail", max_attempts=2))
        jobs = [*quick, slow, failing]
        wait_until(lambda: all(store.get(j.id).state.terminal for j in jobs), 60, what="the jobs to end")

        metrics = scrape(port)
        sleep_done = (
            "jobq_worker_jobs_finished_total",
            (("kind", "sleep"), ("outcome", "succeeded"), ("queue", "default")),
        )
        assert metrics[sleep_done] == 4
        assert (
            metrics[
                ("jobq_worker_jobs_finished_total", (("kind", "fail"), ("outcome", "retrying"), ("queue", "default")))
            ]
            == 1
        )
        assert (
            metrics[
                ("jobq_worker_jobs_finished_total", (("kind", "fail"), ("outcome", "failed"), ("queue", "default")))
            ]
            == 1
        )
        assert metrics[("jobq_worker_jobs_started_total", (("kind", "sleep"), ("queue", "default")))] == 4
        assert metrics[("jobq_worker_jobs_started_total", (("kind", "fail"), ("queue", "default")))] == 2
        assert metrics[("jobq_worker_job_run_seconds_count", (("kind", "sleep"),))] == 4
        assert metrics[("jobq_worker_job_run_seconds_sum", (("kind", "sleep"),))] >= 2.5
        assert metrics[("jobq_worker_job_run_seconds_bucket", (("kind", "sleep"), ("le", "1.0")))] == 3
        assert metrics[("jobq_worker_heartbeats_total", ())] >= 1
        assert metrics[("jobq_worker_leader", ())] == 1
        assert metrics[("jobq_worker_store_available", ())] == 1
        assert metrics[("jobq_worker_store_outages_total", ())] == 0
        assert metrics[("jobq_worker_slots", ())] >= 1 and metrics[("jobq_worker_slots_busy", ())] == 0
        assert metrics[("jobq_worker_info", (("worker", worker.worker_id),))] == 1
        assert store.get(slow.id).state is JobState.SUCCEEDED
    finally:
        worker.terminate()
        assert worker.wait(30) == 0, worker.log()


def test_the_metrics_port_is_off_by_default_and_a_taken_port_is_one_line_and_exit_2(
    sqlite_url: str, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = WorkerProcess(
            sqlite_url, tmp_path, "taken", ["--metrics-port", str(port), "--metrics-host", "127.0.0.1"],
            app="service.examples",
        )  # fmt: skip
        assert worker.wait(30) == 2
    assert f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}" in worker.log()
    assert "Traceback" not in worker.log()
    plain = WorkerProcess(sqlite_url, tmp_path, "plain", [], app="service.examples")
    try:
        plain.wait_started()
        assert "metrics" not in plain.log()
    finally:
        plain.terminate()
        assert plain.wait(30) == 0
