"""The CLI's reads and the rest of its surface: result, list (keyset pages), cancel,
--payload from a file or stdin, --version, -h everywhere, help without type noise.

Most run ``service.cli.main`` in this process (the same code as the console script,
its output and exit code captured): tens of commands, each a subprocess, would cost
the suite a minute. test_cli.py runs the real script for the contract as a whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from service.cli import main
from service.cli.app import cli_command
from tests.cli.test_cli import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    JOBQ,
    Run,
    assert_one_line_error,
    enqueue,
    jobq,
)
from tests.conftest import Database


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """``cli(*args, url=None)``: ``jobq [--database-url URL] args…`` in this process, from ``tmp_path``."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()
        try:
            main([*(["--database-url", url] if url else []), *args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return run


@pytest.fixture
def run(cli: Run, store_url: str) -> Run:
    """``run(*args)``: the in-process ``jobq`` on this test's database."""
    return lambda *args: cli(*args, url=store_url)


def test_result_list_and_cancel(run: Run, db: Database) -> None:
    ids = [enqueue(run, "k", "--payload", json.dumps({"n": n})) for n in range(3)]
    other = enqueue(run, "other", "--tenant", "acme")
    db.execute("UPDATE jobs SET state = 'succeeded', finished_at = created_at WHERE id = %(id)s", id=ids[0])
    db.execute(
        "INSERT INTO job_results (id, job_id, body, created_at) SELECT %(rid)s, id, %(body)s, created_at "
        "FROM jobs WHERE id = %(id)s", rid=uuid.uuid4(), id=ids[0], body='{"ok": true}',
    )  # fmt: skip
    db.execute("UPDATE jobs SET result_id = (SELECT id FROM job_results) WHERE id = %(id)s", id=ids[0])

    shown = run("result", str(ids[0]))
    assert (shown.returncode, json.loads(shown.stdout)) == (EXIT_OK, {"ok": True})
    assert json.loads(run("result", str(ids[0]), "--json").stdout) == {"job_id": str(ids[0]), "result": {"ok": True}}
    early = run("result", str(ids[1]))
    assert_one_line_error(early, EXIT_FAILED)
    assert "queued" in early.stderr
    assert_one_line_error(run("result", str(uuid.uuid4())), EXIT_FAILED)

    first = run("list", "--limit", "2", "--json")
    page = json.loads(first.stdout)
    assert [item["job_id"] for item in page["items"]] == [str(ids[2]), str(ids[1])]
    rest = json.loads(run("list", "--limit", "2", "--json", "--after", page["next_after"]).stdout)
    assert [item["job_id"] for item in rest["items"]] == [str(ids[0])] and rest["next_after"] is None
    table = run("list", "--state", "succeeded")
    assert table.returncode == EXIT_OK and table.stdout.split()[:2] == [str(ids[0]), "succeeded"]
    assert str(other) in run("list", "--tenant", "acme").stdout
    assert_one_line_error(run("list", "--state", "done"), EXIT_USAGE)
    assert_one_line_error(run("list", "--limit", "0"), EXIT_USAGE)

    cancelled = run("cancel", str(ids[1]))
    assert cancelled.returncode == EXIT_OK and f"cancelled {ids[1]}" in cancelled.stdout
    assert db.job(ids[1])["state"] == "cancelled"
    db.execute("UPDATE jobs SET state = 'running', attempts = 1, lease_owner = 'w', "
               "lease_expires_at = created_at WHERE id = %(id)s", id=ids[2])  # fmt: skip
    asked = run("cancel", str(ids[2]))
    assert asked.returncode == EXIT_OK and "cancel requested" in asked.stdout
    assert db.job(ids[2])["cancel_requested"] is True
    assert_one_line_error(run("cancel", str(ids[0])), EXIT_FAILED)  # finished: refused
    assert_one_line_error(run("cancel", "nope"), EXIT_USAGE)


def test_payload_from_a_file_and_from_stdin(run: Run, db: Database, tmp_path: Path, store_url: str) -> None:
    """An argument list could not carry this payload; a file can, and a pipe into the real script."""
    # Over what one argument may hold (128 KiB on Linux), under the payload limit (JOBQ_MAX_BODY_BYTES, 1 MiB).
    big = {"text": "x" * 900_000}
    (tmp_path / "payload.json").write_text(json.dumps(big))
    from_file = enqueue(run, "k", "--payload", "@payload.json")
    assert db.job(from_file)["payload"] == big
    environ = {**{k: v for k, v in os.environ.items() if not k.startswith("JOBQ_")}, "JOBQ_DATABASE_URL": store_url}
    piped = subprocess.run([*JOBQ, "enqueue", "k", "--payload", "-"], input='{"from": "stdin"}', cwd=tmp_path,
                           env=environ, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert piped.returncode == EXIT_OK, piped.stderr
    assert db.job(piped.stdout.strip())["payload"] == {"from": "stdin"}
    assert_one_line_error(run("enqueue", "k", "--payload", "@missing.json"), EXIT_USAGE)
    (tmp_path / "list.json").write_text("[1]")
    assert_one_line_error(run("enqueue", "k", "--payload", "@list.json"), EXIT_USAGE)
    assert db.count("jobs") == 2


def test_version_and_short_help_everywhere(tmp_path: Path, cli: Run) -> None:
    version = jobq("--version", url=None, cwd=tmp_path)  # the real script, once
    assert (
        version.returncode == EXIT_OK and version.stdout.startswith("jobq ") and version.stdout.split()[1][0].isdigit()
    )
    command = cli_command()
    paths = [[name] for name in command.commands]  # type: ignore[attr-defined]
    paths += [[name, sub] for name, group in command.commands.items()  # type: ignore[attr-defined]
              for sub in getattr(group, "commands", {})]  # fmt: skip
    assert ["list"] in paths and ["cancel"] in paths and ["result"] in paths
    for path in [[], *paths]:
        shown = cli(*path, "-h")
        assert shown.returncode == EXIT_OK, (path, shown.stderr)
        assert shown.stdout.startswith("Usage: jobq"), path
        for noise in ("<bool>", "<str>", "<int>", "<float>", "{JOB_ID}", "{KIND}"):
            assert noise not in shown.stdout, (path, noise, shown.stdout)


@pytest.mark.parametrize("args", [["nonsense"], ["list", "--bogus"]])
def test_usage_errors_are_one_line(args: list[str], cli: Run) -> None:
    assert_one_line_error(cli(*args), EXIT_USAGE)
