"""deploy/README.md's walk through install, upgrade, rollback, scaling and monitoring on Kubernetes,
checked command by command: the overlay it shows is rendered by kustomize, the two-step apply's
selector picks the migration and what it needs and leaves the API and the workers for the second
step, every object a kubectl line names exists, the `jobq` options it names are real, and the
lines it quotes from `jobq migrate` are the ones jobq prints."""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from service.store.migrate import SchemaStatus
from tests.deploy.manifests import DEPLOY, by_kind, jobq_help, kustomize, option

README = (DEPLOY / "README.md").read_text(encoding="utf-8")
KUBERNETES_PART = README[README.index("## Kubernetes\n") : README.index("## Sizing\n")]


def blocks(language: str, text: str = KUBERNETES_PART) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def commands(program: str) -> list[list[str]]:
    """Every shell command of the Kubernetes part that runs ``program``: in its sh blocks
    (continuations joined), and in its inline code (`kubectl scale …` in the prose)."""
    found = []
    prose = " ".join(re.sub(r"```.*?```", " ", KUBERNETES_PART, flags=re.DOTALL).split())
    inline = [span for span in re.findall(r"`([^`]+)`", prose) if span.startswith(program + " ")]
    for block in [*blocks("sh"), "\n".join(inline)]:
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|;|\|", line.split(" #")[0]):
                words = shlex.split(part.strip().rstrip("&").strip())
                if words and words[0] == program:
                    found.append(words)
    return found


@cache
def overlay() -> tuple[dict[str, Any], ...]:
    """The README's overlay, at overlays/production beside a deploy/ that is this checkout's."""
    (text,) = [b for b in blocks("yaml") if "kind: Kustomization" in b]
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "deploy").symlink_to(DEPLOY)
        production = Path(root) / "overlays" / "production"
        production.mkdir(parents=True)
        (production / "kustomization.yaml").write_text(text)
        return kustomize(os.fspath(production))


def selected(objects: tuple[dict[str, Any], ...], selector: str) -> set[tuple[str, str]]:
    """The objects a set-based ``KEY notin (A,B)`` selector picks, as kubectl does (no label: picked)."""
    found = re.fullmatch(r"(\S+) notin \(([^)]*)\)", selector)
    assert found, f"the walkthrough's selector changed: {selector!r}; teach this test to read it"
    key, values = found.group(1), set(found.group(2).split(","))
    return {
        (o["kind"], o["metadata"]["name"]) for o in objects if o["metadata"].get("labels", {}).get(key) not in values
    }


def test_the_overlay_renders_with_the_image_and_the_monitoring_component() -> None:
    objects = overlay()
    images = {
        c["image"]
        for o in objects
        if o["kind"] in {"Deployment", "Job"}
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"registry.example.com/jobq:0.1.0"}
    assert {"PodMonitor", "PrometheusRule"} <= {o["kind"] for o in objects}


def test_the_first_apply_is_the_migration_and_what_it_needs_and_the_second_the_rest() -> None:
    applies = [c for c in commands("kubectl") if c[1] == "apply" and "overlays/production" in c]
    gated = [c for c in applies if "-l" in c]
    assert len(gated) == 2  # the install and the upgrade (a rollback is the upgrade's commands)
    objects = overlay()
    for command in gated:
        first = selected(objects, option(command, "-l"))
        job = by_kind(objects, "Job", "jobq-migrate")
        assert ("Job", "jobq-migrate") in first
        assert not {("Deployment", "jobq-api"), ("Deployment", "jobq-worker")} & first
        spec = job["spec"]["template"]["spec"]
        needs = {("ServiceAccount", spec["serviceAccountName"]), ("NetworkPolicy", "jobq-migrate")}
        needs |= {("ConfigMap", e["configMapRef"]["name"]) for e in spec["containers"][0]["envFrom"]}
        assert needs <= first, needs - first
        # Each gated apply is followed by the wait for the Job, then the whole apply.
        at = applies.index(command)
        assert applies[at + 1] == ["kubectl", "apply", "-k", "overlays/production"]
    waits = [c for c in commands("kubectl") if c[1] == "wait"]
    assert waits and all("job/jobq-migrate" in c and "--for=condition=complete" in c for c in waits)
    deletes = [c for c in commands("kubectl") if c[1] == "delete"]
    assert deletes and all(c[2:4] == ["job", "jobq-migrate"] for c in deletes)


def test_every_secret_the_objects_read_is_created_by_the_walkthrough() -> None:
    created = {c[4] for c in commands("kubectl") if c[1:4] == ["create", "secret", "generic"]}
    objects = overlay()
    read = {
        ref["secretKeyRef"]["name"]
        for o in objects
        if o["kind"] in {"Deployment", "Job"}
        for c in o["spec"]["template"]["spec"]["containers"]
        for ref in (e.get("valueFrom", {}) for e in c.get("env", []))
        if "secretKeyRef" in ref
    }
    read |= {t["name"] for t in by_kind(objects, "TriggerAuthentication", "jobq-scaler")["spec"]["secretTargetRef"]}
    assert read <= created, read - created


KINDS = {
    "deploy": "Deployment",
    "deployment": "Deployment",
    "scaledobject": "ScaledObject",
    "job": "Job",
    "hpa": "HorizontalPodAutoscaler",
}


def named(command: list[str]) -> list[tuple[str, str]]:
    """The (kind, name) pairs a kubectl line names: ``kind/name`` or ``kind name``."""
    if command[1] == "apply":
        return []  # -k DIRECTORY: rendered by the other tests
    pairs, words = [], command[2:]
    for at, word in enumerate(words):
        kind, _, name = word.partition("/")
        if kind in KINDS and name:
            pairs.append((KINDS[kind], name))
        elif word in KINDS and at + 1 < len(words) and not words[at + 1].startswith("-"):
            pairs.append((KINDS[word], words[at + 1]))
    return pairs


def test_the_objects_the_kubectl_lines_name_exist() -> None:
    objects = overlay()
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    # KEDA makes the HPA of a ScaledObject, named keda-hpa-<ScaledObject>.
    names |= {("HorizontalPodAutoscaler", f"keda-hpa-{n}") for kind, n in names if kind == "ScaledObject"}
    checked = 0
    for command in commands("kubectl"):
        for pair in named(command):
            assert pair in names, (pair, command)
            checked += 1
    assert checked >= 8


def test_the_worker_metrics_port_forward_reaches_the_port_the_worker_serves() -> None:
    (forward,) = [c for c in commands("kubectl") if c[1] == "port-forward"]
    local, remote = forward[3].split(":")
    worker = by_kind(overlay(), "Deployment", "jobq-worker")
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    assert option(container["args"], "--metrics-port") == remote
    (curl,) = [c for c in commands("curl") if "/metrics" in c[-1]]
    assert f"127.0.0.1:{local}/metrics" in curl[-1]


def test_the_jobq_options_the_walkthrough_names_are_real() -> None:
    migrate = jobq_help(["migrate"]).stdout
    for name in ("--wait-for-database", "--lock-timeout"):
        assert name in KUBERNETES_PART and name in migrate
    assert "--metrics-port" in KUBERNETES_PART and "--metrics-port" in jobq_help(["worker"]).stdout


def test_the_rollback_lines_quoted_are_what_jobq_migrate_prints() -> None:
    flat = " ".join(KUBERNETES_PART.split())
    compatible = SchemaStatus("ahead, compatible", "0012", "0011").describe()
    assert compatible + "; nothing to do" in flat.replace("`", "")
    refused = SchemaStatus("ahead", "…", "…").describe()
    assert "error: " + refused.split(": deploy")[0] in flat.replace("`", "")


def test_argo_cd_gates_the_deployments_on_the_migration_job() -> None:
    objects = kustomize()
    job = by_kind(objects, "Job", "jobq-migrate")["metadata"]["annotations"]
    assert job["argocd.argoproj.io/hook"] == "Sync"
    assert job["argocd.argoproj.io/hook-delete-policy"] == "BeforeHookCreation"
    wave = int(job["argocd.argoproj.io/sync-wave"])
    for name in ("jobq-api", "jobq-worker"):
        deployment = by_kind(objects, "Deployment", name)["metadata"]["annotations"]
        assert int(deployment["argocd.argoproj.io/sync-wave"]) > wave
    for text in ("argocd.argoproj.io/hook: Sync", "helm.sh/hook: pre-install,pre-upgrade,pre-rollback"):
        assert text in KUBERNETES_PART


def test_the_walkthrough_covers_install_upgrade_rollback_scaling_and_monitoring() -> None:
    sections = re.findall(r"^### (.+)$", KUBERNETES_PART, flags=re.MULTILINE)
    for needed in ("Install", "Upgrade", "Rollback", "Scaling", "Monitoring"):
        assert any(s.startswith(needed) for s in sections), (needed, sections)
