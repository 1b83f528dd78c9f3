"""The README's API examples run as they stand: the curl block in bash, the Python block
in a fresh interpreter, against a real API and a real worker."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.api.conftest import REPO, LiveApi, WorkerProcess

pytestmark = pytest.mark.slow

README = (REPO / "README.md").read_text(encoding="utf-8")
API_SECTION = README[README.index("\n## REST API\n") :]
BLOCKS = re.findall(r"^```(bash|python)\n(.*?)^```$", API_SECTION, flags=re.MULTILINE | re.DOTALL)


def _block(language: str) -> str:
    found = [body for lang, body in BLOCKS if lang == language]
    assert len(found) == 1, f"expected one {language} block in the README's REST API section, found {len(found)}"
    return found[0]


def test_the_readme_starts_with_jobq_dev() -> None:
    first_command = re.search(r"^    (\S.*)$", README, flags=re.MULTILINE)
    assert first_command and first_command.group(1).endswith("jobq dev"), first_command
    assert README.index("jobq dev") < README.index("\n## Quickstart")


@pytest.fixture
def example_env(
    start_api: Callable[..., LiveApi], start_worker: Callable[..., WorkerProcess], pg_url: str
) -> dict[str, str]:
    api = start_api(pg_url)
    start_worker(pg_url, "--poll-seconds", "0.2")
    venv_bin = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "JOBQ_URL": api.url,
        "JOBQ_TOKEN": api.token("acme"),
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": str(REPO),
    }


def test_the_curl_example_runs(example_env: dict[str, str]) -> None:
    script = _block("bash")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], check=False, env=example_env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    status, result = done.stdout.splitlines()[0], done.stdout.splitlines()[-1]
    assert json.loads(status)["kind"] == "classify"
    labels = json.loads(result)["result"]["results"]
    assert [entry["item"] for entry in labels] == ["great product", "arrived broken"]

    again = subprocess.run(  # the Idempotency-Key: running it again names the same job
        ["bash", "-euo", "pipefail", "-c", script], check=False, env=example_env, capture_output=True, text=True, timeout=120
    )
    assert json.loads(again.stdout.splitlines()[0])["job_id"] == json.loads(status)["job_id"]


def test_the_python_example_runs(example_env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _block("python")], check=False, env=example_env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith(" queued")
    assert "'label'" in lines[1] and "great product" in lines[1]
    assert lines[2].split()[1] == "classify"


ITEMS_SECTION = README[README.index("\n### A job of many items") : README.index("\n### A fleet on PostgreSQL")]


def test_the_per_item_example_runs(example_env: dict[str, str]) -> None:
    [script] = re.findall(r"^```bash\n(.*?)^```$", ITEMS_SECTION, flags=re.MULTILINE | re.DOTALL)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], check=False, env=example_env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    partial, status, failed = (json.loads(line) for line in done.stdout.splitlines())
    assert len(partial["items"]) <= 3 and [i["index"] for i in partial["items"]] == list(range(len(partial["items"])))
    assert (status["state"], status["items_ok"], status["items_failed"]) == ("succeeded", 198, 2)
    assert [(i["index"], i["error"].splitlines()[0]) for i in failed["items"]] == [
        (17, "ValueError: row 'n/a' is not a number"),
        (150, "ValueError: row None is not a number"),
    ]
