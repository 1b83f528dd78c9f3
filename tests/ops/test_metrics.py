"""``GET /metrics``: Prometheus text that prometheus_client parses, numbers that match the rows."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from service.jobs import NewJob, WorkerInfo
from service.metrics import DURATION_BOUNDS, PICKUP_BOUNDS, MetricsCache, read_snapshot
from service.store import Store
from tests.api.conftest import LiveApi
from tests.conftest import Database
from tests.ops.conftest import backdate, claim_all, db_time, fail_jobs, succeed_jobs
from tests.store.builders import reap

Families = dict[str, list[Sample]]


def scrape(api: LiveApi, token: str | None) -> Families:
    response = api.http(token).get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {family.name: family.samples for family in text_string_to_metric_families(response.text)}
    assert all(name.startswith("jobq_") for name in families)
    return families


def values(samples: list[Sample], *labels: str, name: str | None = None) -> dict[tuple[str, ...], float]:
    return {tuple(s.labels[k] for k in labels): s.value for s in samples if name is None or s.name == name}


def seed(store: Store, db: Database) -> None:
    store.enqueue_many([NewJob(kind="resize"), NewJob(kind="resize"), NewJob(kind="ocr"),
                        NewJob(kind="render", queue="gpu")])  # fmt: skip
    claim_all(store, "resize", limit=1)  # one running
    succeed_jobs(store, "resize", 3, queue="fast")
    fail_jobs(store, "ocr", ["boom 1", "boom 2"], queue="fast")
    [old] = succeed_jobs(store, "resize", 1, queue="fast")
    backdate(db, 2 / 24, "id = %(id)s", id=old.id)  # finished two hours ago: outside the last hour
    # A worker that died holding a job: its lease expires and the reaper fails it.
    store.enqueue(NewJob(kind="poison", queue="fast", max_attempts=1))
    store.claim("doomed", ["fast"], 1, 0.05, kinds=["poison"])
    time.sleep(0.2)
    assert reap(store).failed == 1
    store.register_worker(WorkerInfo("w1", "host", 1, ("default",), ("resize",), 2))


def test_the_metrics_parse_and_match_the_database(api: LiveApi, db: Database) -> None:
    seed(api.store, db)
    cutoff = db_time(db, datetime.now(UTC) - timedelta(hours=1))

    metrics = scrape(api, api.token("acme"))

    active = db.rows("SELECT queue, kind, state, count(*) AS n FROM jobs "
                     "WHERE state IN ('queued', 'running') GROUP BY queue, kind, state")  # fmt: skip
    expected_jobs = {(r["queue"], r["kind"], r["state"]): r["n"] for r in active}
    shown_jobs = values(metrics["jobq_jobs"], "queue", "kind", "state")
    assert {k: v for k, v in shown_jobs.items() if v} == expected_jobs
    assert shown_jobs[("default", "ocr", "running")] == 0  # both active states, zeros included

    depth = Counter({(r["queue"],): r["n"] for r in
                     db.rows("SELECT queue, count(*) AS n FROM jobs WHERE state = 'queued' GROUP BY queue")})  # fmt: skip
    assert values(metrics["jobq_queue_depth"], "queue") == {("default",): depth[("default",)], ("gpu",): 1}
    ages = values(metrics["jobq_queue_oldest_queued_age_seconds"], "queue")
    assert 0 <= ages[("default",)] < 120 and 0 <= ages[("gpu",)] < 120

    finished = db.rows("SELECT kind, state, count(*) AS n FROM jobs WHERE finished_at >= %(cutoff)s "
                       "AND state IN ('succeeded', 'failed') GROUP BY kind, state", cutoff=cutoff)  # fmt: skip
    outcomes = {(r["kind"], r["state"]): r["n"] for r in finished}
    assert outcomes == {("resize", "succeeded"): 3, ("ocr", "failed"): 2, ("poison", "failed"): 1}
    assert values(metrics["jobq_jobs_succeeded_last_hour"], "kind") == {("resize",): 3, ("ocr",): 0, ("poison",): 0}
    assert values(metrics["jobq_jobs_failed_last_hour"], "kind") == {("resize",): 0, ("ocr",): 2, ("poison",): 1}
    assert values(metrics["jobq_job_failure_ratio"], "kind") == {("resize",): 0.0, ("ocr",): 1.0, ("poison",): 1.0}

    ran = {(r["kind"],): r["n"] for r in db.rows(
        "SELECT kind, count(*) AS n FROM jobs WHERE finished_at >= %(cutoff)s "
        "AND state IN ('succeeded', 'failed') AND started_at IS NOT NULL GROUP BY kind", cutoff=cutoff)}  # fmt: skip
    assert values(metrics["jobq_job_duration_seconds_gcount"], "kind") == ran
    picked = {(r["kind"],): r["n"] for r in db.rows(
        "SELECT j.kind, count(*) AS n FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id "
        "WHERE a.finished_at >= %(cutoff)s GROUP BY j.kind", cutoff=cutoff)}  # fmt: skip
    assert values(metrics["jobq_job_pickup_latency_seconds_gcount"], "kind") == picked
    for name, bounds, totals in [("jobq_job_duration_seconds", DURATION_BOUNDS, ran),
                                 ("jobq_job_pickup_latency_seconds", PICKUP_BOUNDS, picked)]:  # fmt: skip
        for (kind,), total in totals.items():
            buckets = [s for s in metrics[name] if s.name == f"{name}_bucket" and s.labels["kind"] == kind]
            assert [float(s.labels["le"]) for s in buckets] == [*map(float, bounds), float("inf")]
            counts = [s.value for s in buckets]
            assert counts == sorted(counts) and counts[-1] == total  # cumulative, +Inf is everything
    durations = values(metrics["jobq_job_duration_seconds"], "kind", "le", name="jobq_job_duration_seconds_bucket")
    assert durations[("resize", "5.0")] == 3  # finished within a second or so, even on a busy machine

    reclaimed = db.count("job_attempts", "outcome = 'lease_expired' AND finished_at >= %(cutoff)s", cutoff=cutoff)
    assert reclaimed == 1
    assert metrics["jobq_jobs_reclaimed_last_hour"][0].value == reclaimed
    assert metrics["jobq_workers_alive"][0].value == 1
    assert metrics["jobq_metrics_read_duration_seconds"][0].value >= 0

    if db.dialect == "postgresql":
        assert metrics["jobq_jobs_table_dead_tuples"][0].value >= 0
        assert metrics["jobq_oldest_transaction_age_seconds"][0].value >= 0
    else:  # SQLite measures neither
        assert "jobq_jobs_table_dead_tuples" not in metrics
        assert "jobq_oldest_transaction_age_seconds" not in metrics


def test_metrics_need_no_token_and_work_with_auth_off(
    api: LiveApi, start_api: Callable[..., LiveApi], store_url: str
) -> None:
    assert scrape(api, None)["jobq_workers_alive"][0].value == 0
    assert api.http().get("/v1/failures").status_code == 401  # the /v1 routes still need one
    open_api = start_api(store_url, auth=False)
    assert scrape(open_api, None)["jobq_workers_alive"][0].value == 0
    assert open_api.http().get("/v1/failures").status_code == 200


def test_the_text_is_cached_for_a_few_seconds(live: Store) -> None:
    now = [100.0]
    cache = MetricsCache(live, ttl=5.0, clock=lambda: now[0])
    first = cache.render()
    live.enqueue(NewJob(kind="resize"))

    now[0] += 4.9
    assert cache.render() is first
    now[0] += 0.2
    fresh = cache.render().decode()
    assert 'jobq_queue_depth{queue="default"} 1.0' in fresh


@pytest.mark.postgres_only(reason="PostgreSQL's statistics views")
def test_an_open_transaction_shows_its_age(live: Store, store_url: str) -> None:
    with psycopg.connect(store_url) as idle:  # not autocommit: the SELECT opens a transaction
        idle.execute("SELECT 1")
        time.sleep(1.0)
        health = read_snapshot(live).health
    assert health.oldest_transaction_age_seconds is not None and health.oldest_transaction_age_seconds >= 1.0
    assert isinstance(health.jobs_dead_tuples, int) and health.jobs_dead_tuples >= 0
    after = read_snapshot(live).health.oldest_transaction_age_seconds
    assert after is not None and after < 1.0
