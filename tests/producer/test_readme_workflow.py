"""The README's Workflows example runs as it stands (in this process, on both stores): five
jobs in one batch, run by a real worker, the last one publishing every translation."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from service.jobs import JobState
from service.store import Store
from tests.worker.test_worker_in_process import running_worker

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def workflows_example() -> str:
    start = README.index("\n## Workflows\n")
    end = README.index("\n## ", start + 5)
    [block] = re.findall(r"^```python\n(.*?)^```$", README[start:end], flags=re.MULTILINE | re.DOTALL)
    return block


def test_the_readme_workflow_example_runs(store_url: str, make_store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_DATABASE_URL", store_url)
    namespace: dict[str, Any] = {"__name__": "workflow"}
    exec(compile(workflows_example(), "README.md#workflows", "exec"), namespace)  # noqa: S102 - our own README
    store: Store = make_store(store_url)
    last = namespace["last"]
    assert last.parents_pending == 3
    with running_worker(store, namespace["app"], concurrency=2):
        deadline = time.monotonic() + 30
        while store.get(last.id).state is not JobState.SUCCEEDED:
            assert time.monotonic() < deadline, "the workflow did not finish"
            time.sleep(0.05)
    assert store.get_result(last.id) == {"languages": ["de", "fr", "ja"]}
