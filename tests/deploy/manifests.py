"""The files under deploy/, loaded the way their tools load them, for the deploy tests."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent  # the test venv's scripts: jobq, hadolint
DOCKERFILE = DEPLOY / "Dockerfile"


def dockerfile_instruction(name: str) -> list[str]:
    """The arguments of each ``NAME`` instruction of the Dockerfile (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [line.split(None, 1)[1] for line in text.splitlines() if line.split(None, 1)[:1] == [name]]


def entrypoint() -> list[str]:
    (value,) = dockerfile_instruction("ENTRYPOINT")
    return list(json.loads(value))


def entrypoint_command() -> list[str]:
    """What the image's PID 1 (tini) runs: the entry point after ``tini --``."""
    init = ["/usr/bin/tini", "--"]
    assert entrypoint()[: len(init)] == init, "tini is PID 1"
    return entrypoint()[len(init) :]


@cache
def _help(arguments: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    command = [str(BIN / entrypoint_command()[0]), *arguments, "--help"]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def jobq_help(arguments: list[str]) -> subprocess.CompletedProcess[str]:
    """``jobq ARGUMENTS --help`` (the image's entry point): exits 0 only for a real command whose
    every option exists. Asked once per argument list: compose and Kubernetes share commands."""
    return _help(tuple(arguments))


def jobq_settings() -> set[str]:
    """Every environment variable service/config.py reads."""
    prefix = Settings.model_config.get("env_prefix", "")
    return {f"{prefix}{name}".upper() for name in Settings.model_fields}


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


@cache
def kustomize(directory: str = "k8s") -> tuple[dict[str, Any], ...]:
    """``kubectl kustomize deploy/DIRECTORY``: the objects as the cluster would get them."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("KUBECTL IS MISSING: deploy/k8s was not rendered nor validated (install kubectl)")
    rendered = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / directory)], capture_output=True, text=True, timeout=60
    )  # an absolute directory (a test's overlay) stays as it is
    assert rendered.returncode == 0, rendered.stderr
    return tuple(doc for doc in yaml.safe_load_all(rendered.stdout) if doc)


@cache
def kustomize_with_components(*components: str) -> tuple[dict[str, Any], ...]:
    """deploy/k8s with optional components of deploy/k8s/components, as an operator's overlay adds them."""
    with tempfile.TemporaryDirectory() as overlay:
        base = os.path.relpath(DEPLOY / "k8s", overlay)
        used = [os.path.relpath(DEPLOY / "k8s" / "components" / name, overlay) for name in components]
        kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                         "resources": [base], "components": used}  # fmt: skip
        (Path(overlay) / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        return kustomize(overlay)


def by_kind(objects: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, got {len(found)}"
    return found[0]


def scaled_object() -> dict[str, Any]:
    return by_kind(kustomize(), "ScaledObject", "jobq-worker")


def keda_query() -> str:
    """The PostgreSQL trigger's query of the ScaledObject, as deploy/k8s renders it."""
    (trigger,) = [t for t in scaled_object()["spec"]["triggers"] if t["type"] == "postgresql"]
    return str(trigger["metadata"]["query"])


def option(command: list[str], name: str) -> str:
    """The value given to ``--name`` in an argument list (the test fails when it is absent)."""
    assert name in command, f"{name} is not given in {command}"
    return command[command.index(name) + 1]


_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s)?")


def compose_seconds(duration: str) -> float:
    """A compose duration (``45s``, ``1m30s``, ``2h``) in seconds."""
    match = _DURATION.fullmatch(duration)
    assert match and duration, f"not a compose duration: {duration!r}"
    hours, minutes, seconds = match.groups()
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds or 0)
