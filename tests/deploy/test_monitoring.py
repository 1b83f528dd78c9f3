"""deploy/k8s/components/monitoring, checked offline: it renders; the PodMonitors select jobq's pods
on ports they declare; every PrometheusRule expression and every dashboard query parses as PromQL
(promql-parser, Prometheus' grammar) and names only metrics jobq exports, collected by running
service/metrics.py's collector against a real store with a little history."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import promql_parser
import pytest

from service.jobs import NewJob
from service.limits import Limit
from service.metrics import SnapshotCollector, read_snapshot
from service.retry import GiveUp
from service.store import Store
from tests.deploy.manifests import by_kind, jobq_help, kustomize_with_components, option
from tests.deploy.test_kubernetes import validate_builtin


@cache
def rendered() -> tuple[dict[str, Any], ...]:
    return kustomize_with_components("monitoring")


def metric_names(expression: str) -> set[str]:
    """Every metric an expression selects, read from its syntax tree (a parse error fails the test)."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            names.add(node.name)
            return
        for child in ("lhs", "rhs", "expr", "param", "vector_selector"):
            if (value := getattr(node, child, None)) is not None:
                walk(value)
        for argument in getattr(node, "args", None) or []:
            walk(argument)

    walk(promql_parser.parse(expression))
    return names


@pytest.fixture
def exported(pg_url: str, make_store: Callable[..., Store]) -> set[str]:
    """The names /metrics serves, from the collector run on a PostgreSQL store with a job of each outcome,
    a limit and a worker: so every family, histogram buckets included, has samples."""
    store = make_store(pg_url)
    store.set_limit(Limit("queue:default", concurrency=5))
    store.enqueue_many([NewJob(kind="k") for _ in range(3)])
    done, failing, _ = store.claim("metrics-test", ["default"], 3, 60)
    store.complete(done.lease, {"ok": True})
    store.fail(failing.lease, "ValueError: boom", GiveUp())
    names: set[str] = set()
    for family in SnapshotCollector(read_snapshot(store)).collect():
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def rule_expressions() -> Iterator[tuple[str, str]]:
    rule = by_kind(rendered(), "PrometheusRule", "jobq")
    for group in rule["spec"]["groups"]:
        for entry in group["rules"]:
            yield entry["alert"], entry["expr"]


def dashboard() -> dict[str, Any]:
    (config_map,) = [
        o for o in rendered() if o["kind"] == "ConfigMap" and "grafana_dashboard" in o["metadata"].get("labels", {})
    ]
    (text,) = config_map["data"].values()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def test_the_component_renders_and_validates() -> None:
    objects = rendered()
    validate_builtin(objects)
    kinds = {o["kind"] for o in objects}
    assert {"PodMonitor", "PrometheusRule"} <= kinds


@pytest.mark.parametrize(
    ("monitor", "component", "port"), [("jobq-api", "api", "http"), ("jobq-worker", "worker", "metrics")]
)
def test_pod_monitors_select_jobq_pods_on_their_ports(monitor: str, component: str, port: str) -> None:
    spec = by_kind(rendered(), "PodMonitor", monitor)["spec"]
    deployment = by_kind(rendered(), "Deployment", f"jobq-{component}")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["port"] == port and endpoint["path"] == "/metrics"
    declared = {p["name"] for c in deployment["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
    assert port in declared


def test_the_worker_serves_its_metrics_on_the_port_the_pod_monitor_scrapes() -> None:
    """The worker's --metrics-port is the containerPort named `metrics` (jobq-worker's PodMonitor),
    and that option is a real one of `jobq worker` (tests/worker/test_worker_metrics.py runs it)."""
    worker = by_kind(rendered(), "Deployment", "jobq-worker")
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    (port,) = [p for p in container["ports"] if p["name"] == "metrics"]
    assert int(option(container["args"], "--metrics-port")) == port["containerPort"]
    assert "--metrics-port" in jobq_help(["worker"]).stdout


def test_the_readme_alerts_are_shipped() -> None:
    alerts = dict(rule_expressions())
    assert set(alerts) == {"JobqFailureRatioHigh", "JobqOldestDueJobWaiting", "JobqLongTransaction", "JobqNoLiveWorker"}
    assert metric_names(alerts["JobqFailureRatioHigh"]) >= {"jobq_job_failure_ratio"}
    assert metric_names(alerts["JobqOldestDueJobWaiting"]) == {"jobq_queue_oldest_queued_age_seconds"}
    assert metric_names(alerts["JobqLongTransaction"]) == {"jobq_oldest_transaction_age_seconds"}
    assert "jobq_workers_alive" in metric_names(alerts["JobqNoLiveWorker"])
    for group in by_kind(rendered(), "PrometheusRule", "jobq")["spec"]["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] and rule["annotations"]["summary"] and rule["for"]


@pytest.mark.postgres_only(reason="jobq_oldest_transaction_age_seconds is exported on PostgreSQL only")
def test_every_metric_a_rule_or_panel_names_is_one_jobq_exports(exported: set[str]) -> None:
    queries = [expr for _, expr in rule_expressions()]
    queries += [t["expr"] for panel in dashboard()["panels"] for t in panel["targets"]]
    assert len(queries) >= 10
    for query in queries:
        unknown = metric_names(query) - exported
        assert metric_names(query) and not unknown, f"{query!r} names metrics jobq does not export: {unknown}"


def test_the_check_catches_a_misspelt_metric_and_bad_syntax() -> None:
    assert metric_names("max by (kind) (jobq_job_failur_ratio) > 0.2") == {"jobq_job_failur_ratio"}
    with pytest.raises(Exception):  # noqa: B017  # promql-parser raises a plain ValueError-like error
        metric_names("max by (kind (jobq_job_failure_ratio)")


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    board = dashboard()
    assert board["uid"] and board["title"] and board["panels"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    for panel in board["panels"]:
        assert panel["targets"] and all(t["datasource"]["type"] == "prometheus" for t in panel["targets"])


@pytest.mark.postgres_only(reason="jobq_oldest_transaction_info is exported on PostgreSQL only")
def test_the_long_transaction_alert_fires_past_five_minutes_and_names_who_holds_it(exported: set[str]) -> None:
    [rule] = [
        r
        for group in by_kind(rendered(), "PrometheusRule", "jobq")["spec"]["groups"]
        for r in group["rules"]
        if r["alert"] == "JobqLongTransaction"
    ]
    assert rule["expr"] == "max(jobq_oldest_transaction_age_seconds) > 300"
    # The description asks Prometheus (a template query) for the holder's labels.
    [query] = re.findall(r'query "([^"]+)"', rule["annotations"]["description"])
    assert metric_names(query) == {"jobq_oldest_transaction_info"} <= exported
    for label in ("pid", "usename", "application_name", "state"):
        assert f".Labels.{label}" in rule["annotations"]["description"]
