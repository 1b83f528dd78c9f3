"""deploy/k8s, rendered by ``kubectl kustomize`` and validated offline: every object against the
Kubernetes schemas (kubernetes-validate, strict), the ScaledObject against KEDA's own CRD
(vendored beside this file), every jobq container's arguments through the real ``jobq --help``, the grace rule."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy.manifests import (
    DEPLOY,
    by_kind,
    compose,
    entrypoint_command,
    jobq_help,
    jobq_settings,
    keda_query,
    kustomize,
    kustomize_with_components,
    option,
    scaled_object,
)

KUBERNETES_VERSION = "1.30"  # the oldest minor the manifests promise to fit (deploy/README.md)
KUSTOMIZE_COMPONENTS = DEPLOY / "k8s" / "components"
KEDA_CRD = Path(__file__).with_name("keda.sh_scaledobjects.yaml")  # its first lines name its source


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj["spec"]["template"]["spec"] if obj["kind"] in {"Deployment", "Job"} else {}
    return list(spec.get("containers", [])) + list(spec.get("initContainers", []))


def test_every_object_validates_against_the_kubernetes_schemas() -> None:
    objects = kustomize()
    kinds = sorted({o["kind"] for o in objects})
    assert kinds == [
        "ConfigMap", "Deployment", "Job", "NetworkPolicy", "PodDisruptionBudget", "ScaledObject", "Service",
        "ServiceAccount", "TriggerAuthentication",
    ]  # fmt: skip
    validate_builtin(objects)


CUSTOM_KINDS = {"ScaledObject", "TriggerAuthentication", "PodMonitor", "PrometheusRule"}  # checked on their own


def validate_builtin(objects: tuple[dict[str, Any], ...]) -> None:
    """Every object of Kubernetes' own kinds against the schemas of KUBERNETES_VERSION, strict."""
    for obj in objects:
        if obj["kind"] in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message} at {list(exc.path)}")


def test_validation_can_fail() -> None:
    """A misspelt field is refused (strict), so the test above proves something."""
    broken = json.loads(json.dumps(by_kind(kustomize(), "Deployment", "jobq-worker")))
    broken["spec"]["template"]["spec"]["terminationGracePeriod"] = 45
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)
    wrong = json.loads(json.dumps(scaled_object()))
    wrong["spec"]["minReplicas"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, keda_schema())


def _strict(schema: Any) -> Any:
    """An OpenAPI schema of a CRD, refusing unknown fields where it lists the known ones."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@cache
def keda_schema() -> dict[str, Any]:
    """The vendored CRD's schema of the version deploy/k8s's ScaledObject names, made strict."""
    crd = yaml.safe_load(KEDA_CRD.read_text())
    obj = scaled_object()
    group, version = obj["apiVersion"].split("/")
    assert crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == obj["kind"]
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema: dict[str, Any] = _strict(served["schema"]["openAPIV3Schema"])
    return schema


def test_scaled_object_validates_against_keda_crd() -> None:
    jsonschema.validate(scaled_object(), keda_schema())


def test_keda_postgresql_trigger_as_the_scaler_reads_it() -> None:
    """What KEDA's PostgreSQL scaler needs (pkg/scalers/postgresql_scaler.go): a query, a
    non-zero targetQueryValue, a connection it can resolve from the target's container env."""
    obj = scaled_object()
    spec = obj["spec"]
    assert by_kind(kustomize(), "Deployment", spec["scaleTargetRef"]["name"]), "its target is rendered"
    (trigger,) = spec["triggers"]
    metadata = trigger["metadata"]
    assert trigger["type"] == "postgresql"
    assert float(metadata["targetQueryValue"]) > 0
    float(metadata["activationTargetQueryValue"])
    assert metadata["query"].strip()
    assert 0 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    assert 0 < spec["fallback"]["replicas"] <= spec["maxReplicaCount"] and spec["fallback"]["failureThreshold"] > 0
    # Its connection: a TriggerAuthentication giving the scaler's own URL (deploy/scaler.sql's role),
    # never the workers' (which may write every table).
    assert "connectionFromEnv" not in metadata and "connection" not in metadata
    auth = by_kind(kustomize(), "TriggerAuthentication", trigger["authenticationRef"]["name"])
    (secret,) = auth["spec"]["secretTargetRef"]
    assert secret["parameter"] == "connection" and secret["name"] != "jobq-database"


def test_a_scaled_deployment_sets_no_replicas() -> None:
    """An apply must not reset the count the HPA chose: KEDA's target has no spec.replicas."""
    objects = kustomize()
    for scaled in (o for o in objects if o["kind"] == "ScaledObject"):
        target = by_kind(objects, "Deployment", scaled["spec"]["scaleTargetRef"]["name"])
        assert "replicas" not in target["spec"], f"{target['metadata']['name']} sets replicas under KEDA"


def test_the_scaler_asks_for_the_queues_and_kinds_the_worker_claims() -> None:
    """One place (the ConfigMap jobq-worker-claims, read by kustomize only) fills both the worker's
    --queues and the query; the kinds must be those the worker's --app registers."""
    from service.worker import load_app

    (container,) = containers(by_kind(kustomize(), "Deployment", "jobq-worker"))
    queues = option(container["args"], "--queues").split(",")
    kinds = sorted(load_app(option(container["args"], "--app")).kinds)
    call = re.search(
        r"jobq_slots_needed\(string_to_array\('([^']*)', ','\),\s*string_to_array\('([^']*)', ','\)\)", keda_query()
    )
    assert call, keda_query()
    assert call.group(1).split(",") == queues
    assert sorted(call.group(2).split(",")) == kinds, "the scaler counts exactly the kinds the worker runs"
    assert not [o for o in kustomize() if o["metadata"]["name"] == "jobq-worker-claims"], "not applied"


def test_keda_query_divides_by_the_workers_concurrency() -> None:
    """The query answers workers needed; its divisor must be the slots of one worker."""
    (container,) = containers(by_kind(kustomize(), "Deployment", "jobq-worker"))
    concurrency = int(option(container["args"], "--concurrency"))
    divisor = re.search(r"/\s*(\d+)\s*$", keda_query())
    assert divisor and int(divisor.group(1)) == concurrency


@pytest.mark.parametrize(
    ("kind", "name"), [("Job", "jobq-migrate"), ("Deployment", "jobq-api"), ("Deployment", "jobq-worker")]
)
def test_container_arguments_are_real_jobq_commands(kind: str, name: str) -> None:
    obj = by_kind(kustomize(), kind, name)
    (container,) = containers(obj)
    assert "command" not in container and entrypoint_command() == ["jobq"], "the image's entry point runs them"
    checked = jobq_help(container["args"])
    assert checked.returncode == 0, f"`jobq {' '.join(container['args'])}`: {checked.stderr}"
    pod = obj["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    resources = container["resources"]
    assert resources["requests"] and resources["limits"]
    secret = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert secret["JOBQ_DATABASE_URL"] == {"name": "jobq-database", "key": "url"}


def test_worker_grace_and_no_probes() -> None:
    worker = by_kind(kustomize(), "Deployment", "jobq-worker")
    (container,) = containers(worker)
    grace = float(option(container["args"], "--grace-seconds"))
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > grace
    assert not {"livenessProbe", "readinessProbe", "startupProbe"} & set(container), "a busy worker is healthy"
    assert worker["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdbs = [o for o in kustomize() if o["kind"] == "PodDisruptionBudget"]
    labels = worker["spec"]["template"]["metadata"]["labels"]
    assert any(all(labels.get(k) == v for k, v in p["spec"]["selector"]["matchLabels"].items()) for p in pdbs)


def test_api_probes_and_service() -> None:
    api = by_kind(kustomize(), "Deployment", "jobq-api")
    (container,) = containers(api)
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    port = int(option(container["args"], "--port"))
    assert [p["containerPort"] for p in container["ports"]] == [port]
    service = by_kind(kustomize(), "Service", "jobq-api")
    assert service["spec"]["selector"].items() <= api["spec"]["template"]["metadata"]["labels"].items()


def test_api_pods_keep_serving_through_endpoint_removal_and_stop_inside_their_grace() -> None:
    """preStop sleeps before SIGTERM (endpoint removal races it); then jobq serve's bounded stop
    (SHUTDOWN_GRACE_SECONDS, long polls answered at once: tests/api/test_graceful_shutdown.py)."""
    from service.cli.processes import SHUTDOWN_GRACE_SECONDS

    api = by_kind(kustomize(), "Deployment", "jobq-api")
    (container,) = containers(api)
    pause = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pause[0] == "sleep" and 1 <= float(pause[1]) <= 10
    listener_and_pool = 5  # NotifyWatcher.stop joins its thread for at most 5 s
    stop = float(pause[1]) + SHUTDOWN_GRACE_SECONDS + listener_and_pool
    assert stop < api["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    api_service = compose()["services"]["api"]
    assert SHUTDOWN_GRACE_SECONDS + listener_and_pool < int(api_service["stop_grace_period"].rstrip("s"))


def test_settings_given_to_containers_are_settings_jobq_reads() -> None:
    objects = kustomize()
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    names = set(config_map["data"])
    for obj in objects:
        for container in containers(obj):
            names |= {e["name"] for e in container.get("env", [])}
            assert [s["configMapRef"]["name"] for s in container["envFrom"]] == [config_map["metadata"]["name"]]
    assert names and not names - jobq_settings(), f"unknown settings: {sorted(names - jobq_settings())}"


def test_without_keda_renders_fixed_workers() -> None:
    """The HPA-free fallback: the same objects but the ScaledObject, and a fixed worker count."""
    objects = kustomize("k8s-without-keda")
    assert not [o for o in objects if o["kind"] in {"ScaledObject", "TriggerAuthentication"}]
    assert by_kind(objects, "Deployment", "jobq-worker")["spec"]["replicas"] > 1
    assert len(objects) == len(kustomize()) - 2


def _ini(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", path.read_text(), flags=re.M))


def test_pgbouncer_component_matches_the_compose_profile() -> None:
    """deploy/k8s/components/pgbouncer renders and validates, runs the compose profile's image with the
    same pool settings, and turns notifications off for every jobq container."""
    objects = kustomize_with_components("pgbouncer")
    validate_builtin(objects)
    deployment = by_kind(objects, "Deployment", "jobq-pgbouncer")
    (container,) = containers(deployment)
    compose_pgbouncer = compose()["services"]["pgbouncer"]
    assert container["image"] == compose_pgbouncer["image"]
    kubernetes_ini = _ini(Path(KUSTOMIZE_COMPONENTS, "pgbouncer", "pgbouncer.ini"))
    compose_ini = _ini(DEPLOY / "pgbouncer" / "pgbouncer.ini")
    differing = {k for k in kubernetes_ini.keys() | compose_ini.keys() if kubernetes_ini.get(k) != compose_ini.get(k)}
    assert differing == {"jobq", "auth_file"}, "only the database's host and the userlist's mount differ"
    (settings,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("jobq-settings")]
    assert settings["data"]["JOBQ_NOTIFY"] == "false", "LISTEN needs a session; transaction mode gives none"
    service = by_kind(objects, "Service", "jobq-pgbouncer")
    assert [p["port"] for p in service["spec"]["ports"]] == [int(kubernetes_ini["listen_port"])]
