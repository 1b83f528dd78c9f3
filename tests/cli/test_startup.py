"""What ``jobq status`` and ``jobq enqueue`` load: the CLI, the settings and the store, never the
API, the worker or an HTTP client (issue 10: they start in under 0.3 s of import time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cli.test_cli import jobq

HEAVY = ("fastapi", "uvicorn", "httpx", "starlette", "service.worker", "service.api", "service.client")

# Runs one command in-process as the console script would, then reports the import time of
# service.cli and which heavy modules were loaded along the way.
PROBE = """
import json, sys, time
started = time.perf_counter()
import service.cli
imported = time.perf_counter() - started
code = 0
try:
    service.cli.main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted({m for m in sys.modules for h in HEAVY if m == h or m.startswith(h + ".")})
print(json.dumps({"import_s": imported, "code": code, "heavy": heavy}), file=sys.stderr)
"""


def probe(*args: str, url: str, cwd: Path) -> dict[str, object]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBQ_")}
    environ["JOBQ_DATABASE_URL"] = url
    result = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{PROBE}", *args],
        cwd=cwd, env=environ, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    report: dict[str, object] = json.loads(result.stderr.strip().splitlines()[-1])
    report["stdout"] = result.stdout
    return report


def test_import_service_loads_neither_the_worker_nor_the_http_client(tmp_path: Path) -> None:
    code = f"import sys, service; print([m for m in {HEAVY!r} if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.stdout.strip() == "[]", result.stderr
    # ...and the names still resolve, each from its layer.
    code = "import service; print(service.App.__module__, service.Client.__module__, service.Queue.__module__)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.stdout.split() == ["service.worker.registry", "service.client", "service.queue"], result.stderr


def test_enqueue_and_status_load_no_api_worker_or_http_client(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobq.db'}"
    assert jobq("migrate", url=url, cwd=tmp_path).returncode == 0
    enqueued = probe("enqueue", "thumbnail", "--payload", '{"n": 1}', url=url, cwd=tmp_path)
    assert enqueued["code"] == 0 and enqueued["heavy"] == [], enqueued
    job_id = str(enqueued["stdout"]).strip()
    status = probe("status", job_id, "--json", url=url, cwd=tmp_path)
    assert status["code"] == 0 and status["heavy"] == [], status
    assert json.loads(str(status["stdout"]))["state"] == "queued"
    # 0.25-0.4 s on an idle machine; loose, since a test machine runs many at once (2.5 s at load 18, 4 Dec).
    assert float(enqueued["import_s"]) < 3.0 and float(status["import_s"]) < 3.0, (enqueued, status)
