"""A worker's own Prometheus metrics, served on ``jobq worker --metrics-port PORT`` (off by default).

The API's /metrics reports the fleet as the database sees it; when the API or the database is
down, that says nothing. Each worker process therefore reports what it did itself:

    jobq_worker_jobs_started_total{kind,queue}           attempts this process claimed and started
    jobq_worker_jobs_finished_total{kind,queue,outcome}  attempts ended here, by outcome: succeeded,
                                                         retrying, failed, cancelled, released, lease_lost
    jobq_worker_job_run_seconds{kind}                    histogram of how long attempts ran here
    jobq_worker_heartbeats_total                         lease renewals written (one per job per beat)
    jobq_worker_leader                                   1 while this worker runs the fleet's maintenance
    jobq_worker_store_available                          1 while the database answers this worker, else 0
    jobq_worker_store_outages_total                      outages seen (store.unavailable lines)
    jobq_worker_slots / jobq_worker_slots_busy           --concurrency, and the slots holding a job now
    jobq_worker_info{worker}                             1, naming the worker id (as in `workers`)

Counters of jobs come from the job events (:func:`service.worker.logs.job_event`: the one call
every end of an attempt makes, in the settler, the finisher and the lease keeper), observed
whatever the log level; the rest is read from the worker when Prometheus scrapes. Its own
registry: nothing of prometheus_client's default process collectors, nothing global.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from service.jobs import ClaimedJob
from service.worker import logs

if TYPE_CHECKING:
    from service.worker.runtime import Worker

# Seconds: from a no-op job to a long one (the run time of jobq's kinds spans that much).
RUN_SECONDS_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, float("inf"))
OUTCOMES = {
    "job.succeeded": "succeeded",
    "job.retrying": "retrying",
    "job.failed": "failed",
    "job.cancelled": "cancelled",
    "job.released": "released",
    "job.lease_lost": "lease_lost",
}


class WorkerMetrics:
    """The metrics of one worker process, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.started = Counter(
            "jobq_worker_jobs_started",
            "Attempts this worker process claimed and started.",
            ["kind", "queue"],
            registry=self.registry,
        )
        self.finished = Counter(
            "jobq_worker_jobs_finished",
            "Attempts that ended in this worker process, by outcome.",
            ["kind", "queue", "outcome"],
            registry=self.registry,
        )
        self.run_seconds = Histogram(
            "jobq_worker_job_run_seconds",
            "How long attempts ran in this worker process (claim to end), by kind.",
            ["kind"],
            buckets=RUN_SECONDS_BUCKETS,
            registry=self.registry,
        )

    def observe(self, event: str, job: ClaimedJob, duration: float | None) -> None:
        """A job event (:func:`service.worker.logs.job_event`)."""
        if event == "job.claimed":
            self.started.labels(job.kind, job.queue).inc()
            return
        outcome = OUTCOMES.get(event)
        if outcome is None:
            return
        self.finished.labels(job.kind, job.queue, outcome).inc()
        if duration is not None:
            self.run_seconds.labels(job.kind).observe(duration)

    def watch(self, worker: Worker) -> None:
        """Report ``worker``'s heartbeats, leadership, store health and slots at each scrape."""
        self.registry.register(_WorkerState(worker))

    def serve(self, port: int, host: str = "0.0.0.0") -> Any:  # noqa: S104  # a pod's port: its NetworkPolicy limits who reaches it
        """Serve /metrics on ``host:port`` in a daemon thread; answers the server (tests shut it)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server


class _WorkerState(Collector):
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Metric]:
        worker = self.worker
        yield CounterMetricFamily(
            "jobq_worker_heartbeats", "Lease renewals this worker wrote.", value=worker.keeper.renewals
        )
        leading = worker.maintenance.is_leader()
        yield GaugeMetricFamily(
            "jobq_worker_leader", "1 while this worker runs the fleet's maintenance duties.", value=int(leading)
        )
        yield GaugeMetricFamily(
            "jobq_worker_store_available",
            "1 while the database answers this worker, 0 during an outage.",
            value=int(worker.health.available),
        )
        yield CounterMetricFamily(
            "jobq_worker_store_outages", "Database outages this worker saw.", value=worker.health.outages
        )
        yield GaugeMetricFamily(
            "jobq_worker_slots", "Jobs this worker runs at once (--concurrency).", value=worker.config.concurrency
        )
        yield GaugeMetricFamily("jobq_worker_slots_busy", "Slots holding a job now.", value=worker.busy)
        info = GaugeMetricFamily("jobq_worker_info", "This worker process, by its id.", labels=["worker"])
        info.add_metric([worker.id], 1)
        yield info


def start_worker_metrics(worker: Worker, port: int, host: str = "0.0.0.0") -> Any:  # noqa: S104
    """Count ``worker``'s job events and serve its metrics on ``port``; answers the HTTP server."""
    metrics = WorkerMetrics()
    metrics.watch(worker)
    logs.observe_job_events(metrics.observe)
    return metrics.serve(port, host)
