"""The README's API examples run as they stand: the curl block in bash, the Python block
in a fresh interpreter, against a real API and a real worker."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from service import Queue
from service.errors import JobFailed
from tests.api.conftest import REPO, LiveApi, WorkerProcess
from tests.conftest import Database

pytestmark = pytest.mark.slow

README = (REPO / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    """The README from the heading ``title`` to the next heading of the same level."""
    start = README.index(f"\n{title}\n")
    level = title.split(" ", 1)[0]
    end = README.find(f"\n{level} ", start + len(title) + 2)
    return README[start : end if end != -1 else len(README)]


API_SECTION = section("## REST API")
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
    worker = start_worker(pg_url, "--poll-seconds", "0.2")
    deadline = time.monotonic() + 30  # as `jobq dev` has it by the time its curl line is printed: a worker up
    while "worker.started" not in worker.output():
        assert time.monotonic() < deadline and worker.process.poll() is None, worker.output()
        time.sleep(0.05)
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
        ["bash", "-euo", "pipefail", "-c", script],
        check=False,
        env=example_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    status, result = done.stdout.splitlines()[0], done.stdout.splitlines()[-1]
    assert json.loads(status)["kind"] == "classify"
    labels = json.loads(result)["result"]["results"]
    assert [entry["item"] for entry in labels] == ["great product", "arrived broken"]

    again = subprocess.run(  # the Idempotency-Key: running it again names the same job
        ["bash", "-euo", "pipefail", "-c", script],
        check=False,
        env=example_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(again.stdout.splitlines()[0])["job_id"] == json.loads(status)["job_id"]


def test_the_python_example_runs(example_env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _block("python")],
        check=False,
        env=example_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith(" queued")
    assert "'label'" in lines[1] and "great product" in lines[1]
    assert lines[2].split()[1] == "classify"


ITEMS_SECTION = README[README.index("\n### A job of many items") : README.index("\n### A fleet on PostgreSQL")]


def test_the_per_item_handler_is_the_one_the_examples_run() -> None:
    [handler] = re.findall(r"^```python\n(.*?)^```$", ITEMS_SECTION, flags=re.MULTILINE | re.DOTALL)
    assert '@app.handler("enrich"' in handler and "ctx.map(" in handler
    assert handler in (REPO / "service" / "examples.py").read_text(encoding="utf-8")


def test_the_per_item_example_runs(example_env: dict[str, str]) -> None:
    [script] = re.findall(r"^```bash\n(.*?)^```$", ITEMS_SECTION, flags=re.MULTILINE | re.DOTALL)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        check=False,
        env=example_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    partial, status, failed = (json.loads(line) for line in done.stdout.splitlines())
    print(f"\nthe partial results a second in: {[i['index'] for i in partial['items']]}, next {partial['next_cursor']}")
    assert len(partial["items"]) <= 3 and [i["index"] for i in partial["items"]] == list(range(len(partial["items"])))
    assert (status["state"], status["items_ok"], status["items_failed"]) == ("succeeded", 198, 2)
    assert [(i["index"], i["error"].splitlines()[0]) for i in failed["items"]] == [
        (17, "ValueError: row 'n/a' is not a number"),
        (150, "ValueError: row None is not a number"),
    ]


def test_the_curl_example_stops_on_a_failed_job(example_env: dict[str, str]) -> None:
    script = _block("bash").replace(
        """'{"kind": "classify", "payload": {"items": ["great product", "arrived broken"]}}'""",
        """'{"kind": "fail", "payload": {"permanent": true, "message": "no such product"}}'""",
    )
    assert '"kind": "fail"' in script
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        check=False,
        env=example_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    last = json.loads(done.stdout.splitlines()[-1])
    assert (last["state"], last["error"].splitlines()[0]) == ("failed", "PermanentError: no such product")


HANDLER_SECTION = section("### A handler")


def test_the_handler_example_runs_as_written(tmp_path: Path, sqlite_url: str) -> None:
    [module] = re.findall(r"^```python\n(.*?)^```$", HANDLER_SECTION, flags=re.MULTILINE | re.DOTALL)
    assert module.startswith("# myhandlers.py\n")
    (tmp_path / "myhandlers.py").write_text(module, encoding="utf-8")
    enqueues = re.findall(r"^    (jobq enqueue .*?)(?:\s+#.*)?$", HANDLER_SECTION, flags=re.MULTILINE)
    assert len(enqueues) == 3, enqueues
    env = {
        **os.environ,
        "JOBQ_DATABASE_URL": sqlite_url,
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
    }
    env.pop("PYTHONPATH", None)  # the current directory is importable, as the README says
    log = tmp_path / "worker.log"
    with open(log, "wb") as output:
        worker = subprocess.Popen(
            ["jobq", "worker", "--app", "myhandlers", "--poll-seconds", "0.2"],
            cwd=tmp_path,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        ids = []
        for line in enqueues:
            done = subprocess.run(
                ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, (line, done.stderr)
            ids.append(done.stdout.strip())
        with Queue(sqlite_url) as queue:
            paid, missing, labelled = queue.wait(ids[0], timeout=60), ids[1], queue.wait(ids[2], timeout=60)
            assert queue.result(paid.id) == {"receipt": "receipt-42"}
            assert paid.max_attempts == 5, "the handler's max_attempts is the kind's default"
            with pytest.raises(JobFailed, match="payload.invoice_id is missing"):
                queue.wait(missing, timeout=60)
            assert queue.get(missing).attempts == 1, "a PermanentError fails at once"
            assert queue.result(labelled.id) == {"labels": ["positive", "negative"]}
            [nightly] = queue.store.list_schedules()
            assert (nightly.name, nightly.spec.cron, nightly.spec.timezone) == (
                "purge_drafts",
                "0 3 * * *",
                "Europe/Berlin",
            )
    except BaseException:
        print(log.read_text(errors="replace")[-3000:])
        raise
    finally:
        worker.terminate()
        worker.wait(30)


@pytest.fixture
def pg_db(pg_url: str) -> Iterator[Database]:
    database = Database(pg_url)
    yield database
    database.close()


PRODUCER_SECTION = section("### The producer API and the transactional enqueue")


def test_the_producer_api_example_runs_on_postgres(
    start_worker: Callable[..., WorkerProcess], pg_url: str, pg_db: Database
) -> None:
    [script] = re.findall(r"^```python\n(.*?)^```$", PRODUCER_SECTION, flags=re.MULTILINE | re.DOTALL)
    pg_db.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    worker = start_worker(pg_url, "--poll-seconds", "0.2")
    deadline = time.monotonic() + 30  # as `jobq dev` has it by the time its curl line is printed: a worker up
    while "worker.started" not in worker.output():
        assert time.monotonic() < deadline and worker.process.poll() is None, worker.output()
        time.sleep(0.05)
    env = {**os.environ, "JOBQ_DATABASE_URL": pg_url, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result, state = done.stdout.splitlines()
    assert "great product" in result and "'label'" in result
    assert state == "queued"
    assert pg_db.count("orders") == 1
    assert pg_db.count("jobs", "kind = 'send_invoice'") == 1, "the job committed with the order"


def test_the_producer_api_example_rolls_back_with_the_callers_transaction(pg_url: str, pg_db: Database) -> None:
    """What the block's last comment promises: an exception inside the block rolls both back."""
    pg_db.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    with Queue(pg_url) as queue:
        with pytest.raises(RuntimeError), psycopg.connect(pg_url) as conn:
            conn.execute("INSERT INTO orders (id) VALUES (%s)", [7])
            queue.enqueue("send_invoice", {"invoice_id": 7}, connection=conn)
            raise RuntimeError("the payment page crashed")
    assert (pg_db.count("orders"), pg_db.count("jobs")) == (0, 0)
