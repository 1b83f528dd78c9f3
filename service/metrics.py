"""``GET /metrics``: the queue in the Prometheus text format, read from the database.

Every number comes from the store, so each API process reports the whole fleet
(scrape one, or all of them and aggregate with ``max``), and a restarted process
reports the same numbers as before. :func:`read_snapshot` makes the few cheap
reads: active rows through their partial indexes, history only within the last
hour through the ``finished_at`` indexes, never a scan of six weeks.
:class:`MetricsCache` keeps the rendered text for ``CACHE_SECONDS`` per process,
so a scrape storm costs the database one round of reads every few seconds.

Metrics (every value is "now" or "within the last hour", so all are gauges):

    jobq_jobs{queue,kind,state}                      queued and running jobs (terminal states are history)
    jobq_queue_depth{queue}                          queued jobs, due or not
    jobq_queue_oldest_queued_age_seconds{queue}      how long the oldest due job has waited (0: none due)
    jobq_jobs_succeeded_last_hour{kind}              jobs that succeeded within the last hour
    jobq_jobs_failed_last_hour{kind}                 jobs that failed for good within the last hour
    jobq_job_failure_ratio{kind}                     failed / (succeeded + failed) within the last hour
    jobq_job_duration_seconds{kind}                  gauge histogram: run time of jobs finished in the last hour
    jobq_job_pickup_latency_seconds{kind}            gauge histogram: due -> claimed, attempts ended in the last hour
    jobq_jobs_reclaimed_last_hour                    attempts ended by lease expiry (crashed or stuck workers)
    jobq_workers_alive                               workers seen within WORKER_ALIVE_SECONDS
    jobq_leader_term, jobq_leader_info{owner}        the maintenance leader's term (0: none) and, while one
                                                     leads, its worker id (value 1)
    jobq_scope_running{scope}, jobq_scope_limit{scope}  limited kind:, queue: and key: scopes: running jobs and
                                                     the concurrency limit (-1: a rate limit only)
    jobq_tenant_scopes_at_limit, jobq_tenant_scopes  tenants whose own counter is full, and tenants with one
                                                     (tenants are never a label: /metrics names no tenant)
    jobq_jobs_table_dead_tuples                      PostgreSQL: dead row versions in jobs (bloat, FAILURE-MODES.md)
    jobq_oldest_transaction_age_seconds              PostgreSQL: the oldest open transaction on the database (0: none)
    jobq_oldest_transaction_info{pid,usename,application_name,state}
                                                     PostgreSQL: who holds it (value 1, no sample while none is
                                                     open; pid is empty for a prepared transaction)
    jobq_replication_xmin_age_transactions           PostgreSQL: transactions a replication slot's xmin or a
                                                     standby's feedback holds vacuum back by (0: none)
    jobq_metrics_read_duration_seconds               how long the reads behind this answer took

Why no ``_total`` counters: a counter must only go up, in one process. These
numbers are read from shared history that ``jobq prune`` deletes, and every API
process answers for the whole fleet, so windowed gauges are the honest type.
Alert on rates with them directly, e.g. ``jobq_job_failure_ratio > 0.2 and
(jobq_jobs_succeeded_last_hour + jobq_jobs_failed_last_hour) >= 10``.

Label cardinality is capped: the ``KIND_SERIES`` kinds with the most jobs (active and
finished in the last hour) keep their name, every other kind is summed under
``kind="other"``, so 200 made-up kinds cost 51 series per metric, not 200.

The histograms' buckets count values below each bound (``width_bucket``), which
differs from Prometheus' "less than or equal" only for a value exactly on a bound.
They have no ``_gsum``: the store counts per bucket and does not sum.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from service.jobs import WORKER_ALIVE_SECONDS, ActiveCount, JobState, KindOutcomes, QueueStats
from service.limits import ScopeUsage, tenant_of
from service.store.base import DatabaseHealth, LeaderLease, Store

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text format, version 0.0.4 (what every Prometheus scrapes)."""

CACHE_SECONDS = 5.0
WINDOW_SECONDS = 3_600.0
"""The last hour: the window of every *_last_hour metric, the ratio and the histograms."""
KIND_SERIES = 50
"""Kinds shown by name; the rest are summed as ``kind="other"`` (see the module docstring)."""
OTHER_KINDS = "other"

DURATION_BOUNDS: tuple[float, ...] = (1, 5, 15, 30, 60, 120, 300, 600, 1_800, 3_600, 7_200, 14_400)
PICKUP_BOUNDS: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3_600)
ACTIVE_STATES = (JobState.QUEUED, JobState.RUNNING)


@dataclass(frozen=True)
class Snapshot:
    """Everything one scrape shows, read from the store in one go."""

    active: list[ActiveCount]
    queues: list[QueueStats]
    outcomes: list[KindOutcomes]
    durations: dict[str, list[int]]
    pickups: dict[str, list[int]]
    reclaimed: int
    workers_alive: int
    health: DatabaseHealth
    read_seconds: float
    scopes: list[ScopeUsage]
    leader: LeaderLease | None = None


def read_snapshot(store: Store, clock: Callable[[], float] = time.monotonic) -> Snapshot:
    started = clock()
    active = store.active_counts()
    queues = store.queue_stats()
    outcomes = store.outcomes(WINDOW_SECONDS)
    durations = store.duration_buckets(WINDOW_SECONDS, DURATION_BOUNDS)
    pickups = store.pickup_buckets(WINDOW_SECONDS, PICKUP_BOUNDS)
    reclaimed = store.lease_expiries(WINDOW_SECONDS)
    workers_alive = len(store.list_workers(WORKER_ALIVE_SECONDS))
    health = store.health_stats()
    scopes = store.scope_usage()
    leader = store.current_leader()
    shown = _busiest_kinds(active, outcomes)
    return Snapshot(
        active=_cap_active(active, shown),
        queues=queues,
        outcomes=_cap_outcomes(outcomes, shown),
        durations=_cap_buckets(durations, shown),
        pickups=_cap_buckets(pickups, shown),
        reclaimed=reclaimed,
        workers_alive=workers_alive,
        health=health,
        read_seconds=clock() - started,
        scopes=scopes,
        leader=leader,
    )


def _busiest_kinds(active: Sequence[ActiveCount], outcomes: Sequence[KindOutcomes]) -> set[str]:
    jobs: dict[str, int] = {}
    for a in active:
        jobs[a.kind] = jobs.get(a.kind, 0) + a.count
    for o in outcomes:
        jobs[o.kind] = jobs.get(o.kind, 0) + o.succeeded + o.failed
    return set(sorted(jobs, key=lambda kind: (-jobs[kind], kind))[:KIND_SERIES])


def _kind(kind: str, shown: set[str]) -> str:
    return kind if kind in shown else OTHER_KINDS


def _cap_active(active: Sequence[ActiveCount], shown: set[str]) -> list[ActiveCount]:
    summed: dict[tuple[str, str, JobState], int] = {}
    for a in active:
        key = (a.queue, _kind(a.kind, shown), a.state)
        summed[key] = summed.get(key, 0) + a.count
    return [ActiveCount(queue, kind, state, count) for (queue, kind, state), count in summed.items()]


def _cap_outcomes(outcomes: Sequence[KindOutcomes], shown: set[str]) -> list[KindOutcomes]:
    summed: dict[str, tuple[int, int]] = {}
    for o in outcomes:
        ok, bad = summed.get(_kind(o.kind, shown), (0, 0))
        summed[_kind(o.kind, shown)] = (ok + o.succeeded, bad + o.failed)
    return [KindOutcomes(kind, ok, bad) for kind, (ok, bad) in sorted(summed.items())]


def _cap_buckets(per_kind: dict[str, list[int]], shown: set[str]) -> dict[str, list[int]]:
    summed: dict[str, list[int]] = {}
    for kind, counts in per_kind.items():
        into = summed.setdefault(_kind(kind, shown), [0] * len(counts))
        for i, count in enumerate(counts):
            into[i] += count
    return summed


class SnapshotCollector:
    """A prometheus_client collector over one :class:`Snapshot` (no global registry)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot
        jobs = GaugeMetricFamily(
            "jobq_jobs", "Queued and running jobs by queue, kind and state.", labels=["queue", "kind", "state"]
        )
        counts = {(a.queue, a.kind, a.state): a.count for a in s.active}
        for queue, kind in sorted({(q, k) for q, k, _ in counts}):
            for state in ACTIVE_STATES:  # both states, 0 included: a series that vanishes cannot be alerted on
                jobs.add_metric([queue, kind, state.value], counts.get((queue, kind, state), 0))
        yield jobs

        depth = GaugeMetricFamily("jobq_queue_depth", "Queued jobs per queue, due or not.", labels=["queue"])
        oldest = GaugeMetricFamily(
            "jobq_queue_oldest_queued_age_seconds",
            "Seconds the oldest due queued job of the queue has waited since it became due (0: none due).",
            labels=["queue"],
        )
        for q in s.queues:
            depth.add_metric([q.queue], q.queued)
            oldest.add_metric([q.queue], q.oldest_queued_age_seconds or 0.0)
        yield depth
        yield oldest

        succeeded = GaugeMetricFamily(
            "jobq_jobs_succeeded_last_hour", "Jobs per kind that succeeded within the last hour.", labels=["kind"]
        )
        failed = GaugeMetricFamily(
            "jobq_jobs_failed_last_hour", "Jobs per kind that failed for good within the last hour.", labels=["kind"]
        )
        ratio = GaugeMetricFamily(
            "jobq_job_failure_ratio",
            "failed / (succeeded + failed) per kind, jobs finished within the last hour.",
            labels=["kind"],
        )
        for o in s.outcomes:
            succeeded.add_metric([o.kind], o.succeeded)
            failed.add_metric([o.kind], o.failed)
            ratio.add_metric([o.kind], o.failure_ratio)
        yield succeeded
        yield failed
        yield ratio

        yield _gauge_histogram(
            "jobq_job_duration_seconds",
            "Run time of the last attempt of jobs that finished within the last hour.",
            DURATION_BOUNDS,
            s.durations,
        )
        yield _gauge_histogram(
            "jobq_job_pickup_latency_seconds",
            "Seconds from due to claimed, of attempts that ended within the last hour.",
            PICKUP_BOUNDS,
            s.pickups,
        )
        yield GaugeMetricFamily(
            "jobq_jobs_reclaimed_last_hour",
            "Attempts ended by lease expiry within the last hour: their workers crashed, hung or lost the database.",
            value=s.reclaimed,
        )
        yield GaugeMetricFamily(
            "jobq_workers_alive",
            f"Worker processes that reported within the last {WORKER_ALIVE_SECONDS:g} seconds.",
            value=s.workers_alive,
        )
        if s.health.jobs_dead_tuples is not None:
            yield GaugeMetricFamily(
                "jobq_jobs_table_dead_tuples",
                "Dead row versions in the jobs table not yet vacuumed (PostgreSQL statistics; a steady climb is bloat).",
                value=s.health.jobs_dead_tuples,
            )
        if s.health.oldest_transaction_age_seconds is not None:
            yield GaugeMetricFamily(
                "jobq_oldest_transaction_age_seconds",
                "Age of the oldest open transaction on the database (PostgreSQL); a long one holds back vacuum.",
                value=s.health.oldest_transaction_age_seconds,
            )
            info = GaugeMetricFamily(
                "jobq_oldest_transaction_info",
                "Who holds the oldest open transaction (1 while one is open): end it with pg_terminate_backend(pid).",
                labels=["pid", "usename", "application_name", "state"],
            )
            if (holder := s.health.oldest_transaction) is not None:
                pid = "" if holder.pid is None else str(holder.pid)
                info.add_metric([pid, holder.usename or "", holder.application_name or "", holder.state or ""], 1)
            yield info
        if s.health.replication_xmin_age is not None:
            yield GaugeMetricFamily(
                "jobq_replication_xmin_age_transactions",
                "Transactions by which a replication slot's xmin or a standby's hot_standby_feedback holds back "
                "vacuum on the primary (0: none).",
                value=s.health.replication_xmin_age,
            )
        running = GaugeMetricFamily(
            "jobq_scope_running", "Jobs running in each limited kind:, queue: or key: scope.", labels=["scope"]
        )
        limit = GaugeMetricFamily(
            "jobq_scope_limit",
            "The concurrency limit of each limited kind:, queue: or key: scope (-1: rate only).",
            labels=["scope"],
        )
        tenants = [u for u in s.scopes if tenant_of(u.scope) is not None]
        for u in s.scopes:
            if tenant_of(u.scope) is None:
                running.add_metric([u.scope], u.running)
                limit.add_metric([u.scope], -1 if u.concurrency is None else u.concurrency)
        yield running
        yield limit
        yield GaugeMetricFamily(
            "jobq_tenant_scopes", "Tenants with a limit of their own or from tenant:*.", value=len(tenants)
        )
        yield GaugeMetricFamily(
            "jobq_tenant_scopes_at_limit",
            "Tenants running as many jobs as their concurrency limit allows.",
            value=sum(1 for u in tenants if u.is_full()),
        )
        yield from leader_metrics(s.leader)
        yield GaugeMetricFamily(
            "jobq_metrics_read_duration_seconds",
            "Seconds the database reads behind this answer took.",
            value=s.read_seconds,
        )


def leader_metrics(leader: LeaderLease | None) -> Iterator[Metric]:
    """Who runs the fleet's maintenance: its term (0 while none leads: alert on a term that stays
    0, or that climbs fast, leaders replaced again and again) and its worker id."""
    yield GaugeMetricFamily(
        "jobq_leader_term",
        "Term of the maintenance leader's lease (0: no worker leads now).",
        value=leader.term if leader else 0,
    )
    info = GaugeMetricFamily(
        "jobq_leader_info", "The maintenance leader's worker id (1 while it leads).", labels=["owner"]
    )
    if leader is not None:
        info.add_metric([leader.owner], 1)
    yield info


def _gauge_histogram(name: str, documentation: str, bounds: Sequence[float], per_kind: dict[str, list[int]]) -> Metric:
    """A gauge histogram per kind: cumulative ``_bucket`` samples and ``_gcount``, no ``_gsum``."""
    metric = Metric(name, documentation, "gaugehistogram")
    for kind in sorted(per_kind):
        counts = per_kind[kind]
        cumulative = 0
        for bound, count in zip([*bounds, float("inf")], counts, strict=True):
            cumulative += count
            metric.add_sample(f"{name}_bucket", {"kind": kind, "le": _le(bound)}, cumulative)
        metric.add_sample(f"{name}_gcount", {"kind": kind}, cumulative)
    return metric


def _le(bound: float) -> str:
    """A bucket's bound as Prometheus writes it: ``1.0``, ``0.25``, ``+Inf``."""
    return "+Inf" if bound == float("inf") else repr(float(bound))


def render(snapshot: Snapshot) -> bytes:
    """The Prometheus text for one snapshot."""
    return generate_latest(SnapshotCollector(snapshot))


class MetricsCache:
    """The rendered text, kept ``ttl`` seconds; one refresh at a time, however many scrapes wait."""

    def __init__(
        self, store: Store, *, ttl: float = CACHE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store = store
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._text: bytes | None = None
        self._expires = 0.0

    def render(self) -> bytes:
        with self._lock:
            if self._text is None or self.clock() >= self._expires:
                self._text = render(read_snapshot(self.store, self.clock))
                self._expires = self.clock() + self.ttl
            return self._text
