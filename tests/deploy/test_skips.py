"""The one tool issue 13 lets the deploy checks skip for is kubectl; when it is missing, the run says
so in its last lines, not only under ``-rs``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.deploy.manifests import ROOT


def test_a_missing_kubectl_skips_and_the_run_says_so_at_its_end(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # an empty directory: no kubectl on the PATH
    env.pop("PYTEST_ADDOPTS", None)  # CI's (--durations) would print after the line this reads
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/deploy/test_kubernetes.py::test_api_probes_and_service",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    tail = run.stdout.splitlines()[-3:]
    assert "1 deploy checks were SKIPPED" in tail[0], run.stdout
    assert tail[1].startswith("KUBECTL IS MISSING"), run.stdout
    assert "1 skipped" in tail[2], run.stdout
