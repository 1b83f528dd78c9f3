"""Every Pod template deploy/k8s renders (with its optional components) passes Pod Security
"restricted", checked control by control as the Kubernetes Pod Security Standards write them
(https://kubernetes.io/docs/concepts/security/pod-security-standards/, baseline and restricted);
no pod mounts a service-account token; NetworkPolicies fence every pod."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from tests.deploy.manifests import by_kind, kustomize, kustomize_with_components

# Restricted: the only volume types allowed.
ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
                   "secret"}  # fmt: skip
# Baseline: sysctls a pod may set.
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}  # fmt: skip
SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def pod_templates(objects: tuple[dict[str, Any], ...]) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in objects:
        if obj["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job"}:
            yield f"{obj['kind']}/{obj['metadata']['name']}", obj["spec"]["template"]["spec"]
        elif obj["kind"] == "CronJob":
            yield f"CronJob/{obj['metadata']['name']}", obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What Pod Security "restricted" (which includes "baseline") refuses in a pod spec."""
    found: list[str] = []
    pod_context = pod.get("securityContext", {})
    containers = [*pod.get("initContainers", []), *pod.get("containers", []), *pod.get("ephemeralContainers", [])]
    # baseline: host namespaces, host paths and ports, privileged, capabilities, /proc, sysctls, SELinux, AppArmor
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            found.append(f"{field}: true")
    for sysctl in pod_context.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"sysctl {sysctl['name']}")
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if "hostPath" in kinds:
            found.append(f"volume {volume['name']}: hostPath")
        if not kinds <= ALLOWED_VOLUMES:
            found.append(f"volume {volume['name']}: type {sorted(kinds - ALLOWED_VOLUMES)}")
    contexts = [("pod", pod_context)] + [(c["name"], c.get("securityContext", {})) for c in containers]
    for where, context in contexts:
        if context.get("seLinuxOptions", {}).get("type") not in SELINUX_TYPES:
            found.append(f"{where}: seLinuxOptions.type")
        if context.get("appArmorProfile", {}).get("type") not in {None, "RuntimeDefault", "Localhost"}:
            found.append(f"{where}: appArmorProfile")
        if context.get("seccompProfile", {}).get("type") == "Unconfined":
            found.append(f"{where}: seccompProfile Unconfined")
        if context.get("runAsUser") == 0:
            found.append(f"{where}: runAsUser 0")
    for container in containers:
        name, context = container["name"], container.get("securityContext", {})
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("procMount", "Default") != "Default":
            found.append(f"{name}: procMount")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            found.append(f"{name}: hostPort")
        # restricted: no escalation, drop ALL (add NET_BIND_SERVICE at most), non-root, a seccomp profile
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation must be false")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name}: capabilities must drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: adds capabilities {capabilities['add']}")
        if context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is not True:
            found.append(f"{name}: runAsNonRoot must be true")
        seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {})).get("type")
        if seccomp not in {"RuntimeDefault", "Localhost"}:
            found.append(f"{name}: seccompProfile must be RuntimeDefault or Localhost")
    return found


def every_rendering() -> list[tuple[dict[str, Any], ...]]:
    return [kustomize(), kustomize("k8s-without-keda"), kustomize_with_components("pgbouncer")]


def test_every_pod_template_passes_pod_security_restricted() -> None:
    checked = 0
    for objects in every_rendering():
        for where, pod in pod_templates(objects):
            assert not restricted_violations(pod), f"{where}: {restricted_violations(pod)}"
            checked += 1
    assert checked >= 7, "the API, the workers, the migration and PgBouncer, in each rendering"


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (["securityContext", "seccompProfile"], None, "seccompProfile must be RuntimeDefault"),
        (["containers", 0, "securityContext", "allowPrivilegeEscalation"], True, "allowPrivilegeEscalation"),
        (["containers", 0, "securityContext", "capabilities"], {"drop": ["NET_RAW"]}, "drop ALL"),
        (["securityContext", "runAsNonRoot"], None, "runAsNonRoot"),
        (["hostNetwork"], True, "hostNetwork"),
        (["volumes"], [{"name": "h", "hostPath": {"path": "/"}}], "hostPath"),
    ],
)
def test_the_check_refuses_what_restricted_refuses(path: list[Any], value: Any, expected: str) -> None:
    pod = copy.deepcopy(by_kind(kustomize(), "Deployment", "jobq-api")["spec"]["template"]["spec"])
    parent = pod
    for key in path[:-1]:
        parent = parent[key]
    if value is None:
        parent.pop(path[-1], None)
    else:
        parent[path[-1]] = value
    assert any(expected in v for v in restricted_violations(pod)), restricted_violations(pod)


def test_no_pod_mounts_a_service_account_token() -> None:
    for objects in every_rendering():
        accounts = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ServiceAccount"}
        for where, pod in pod_templates(objects):
            account = accounts[pod["serviceAccountName"]]  # never the namespace's default account
            assert account.get("automountServiceAccountToken") is False, where
            assert pod.get("automountServiceAccountToken") is False, where


def test_network_policies_fence_every_pod() -> None:
    """Each pod is selected by a policy with both directions; the API is reached from the ingress and
    monitoring namespaces only, the migration from nowhere; egress is PostgreSQL and DNS."""
    objects = kustomize()
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    for obj in (o for o in objects if o["kind"] in {"Deployment", "Job"}):
        where, labels = obj["metadata"]["name"], obj["spec"]["template"]["metadata"]["labels"]
        (policy,) = [p for p in policies if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()]
        spec = policy["spec"]
        assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"], where
        ports = {(p["port"], p.get("protocol", "TCP")) for rule in spec["egress"] for p in rule["ports"]}
        assert ports == {(5432, "TCP"), (6432, "TCP"), (53, "UDP"), (53, "TCP")}, where
        assert all("to" not in rule for rule in spec["egress"]), "the database may be outside the cluster"
    api = by_kind(objects, "NetworkPolicy", "jobq-api")["spec"]["ingress"]
    (rule,) = api
    (source,) = rule["from"]
    (expression,) = source["namespaceSelector"]["matchExpressions"]
    assert expression["key"] == "kubernetes.io/metadata.name" and sorted(expression["values"]) == [
        "ingress-nginx", "monitoring"
    ]  # fmt: skip
    assert by_kind(objects, "NetworkPolicy", "jobq-migrate")["spec"]["ingress"] == []
    (worker,) = by_kind(objects, "NetworkPolicy", "jobq-worker")["spec"]["ingress"]
    assert [p["port"] for p in worker["ports"]] == ["metrics"], "the worker takes only scrapes"
