"""The CLI walked with bad inputs (issue 26): bad URLs, bad files, deep and huge payloads.
Each ends in one line on stderr, no traceback, and the documented exit code (2: bad input)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_cli import JOBQ, assert_one_line_error, jobq
from tests.conftest import sqlite_url_for


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://root@localhost/jobq", "must start with postgresql:// or sqlite:///, not 'mysql'"),
        ("foo", "must start with postgresql:// or sqlite:///, not 'foo'"),
        ("", "is empty"),
        ("postgresql+psycopg://postgres@127.0.0.1:1/jobq", "not 'postgresql+psycopg'"),
        ("sqlite:///", "names no file"),
    ],
    ids=["mysql", "foo", "empty", "sqlalchemy-spelling", "sqlite-without-a-path"],
)
@pytest.mark.parametrize("command", [["migrate"], ["status", "00000000-0000-0000-0000-000000000000"], ["failures"]])
def test_every_command_refuses_a_bad_database_url_alike(tmp_path: Path, url: str, says: str, command: list[str]):
    result = jobq(*command, url=url, cwd=tmp_path)
    assert_one_line_error(result, 2)
    assert says in result.stderr
    assert not (tmp_path / "jobq.db").exists()  # an empty URL no longer migrates ./jobq.db


def test_enqueue_refuses_what_the_api_refuses(tmp_path: Path, sqlite_template: Path):
    url = sqlite_url_for(tmp_path / "jobq.db")
    (tmp_path / "jobq.db").write_bytes(sqlite_template.read_bytes())
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"blob": "x" * 2_000_000}))
    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' + "[" * 100_000 + "]" * 100_000 + "}")
    cases = [
        (f"@{huge}", "over the limit of 1048576 (JOBQ_MAX_BODY_BYTES)"),
        (f"@{deep}", "nested too deeply"),
        (f"@{tmp_path / 'missing.json'}", "cannot read"),
        ("[1, 2]", "must be a JSON object"),
        ('{"a": NaN}', "NaN is not allowed"),
    ]
    for payload, says in cases:
        result = jobq("enqueue", "resize", "--payload", payload, url=url, cwd=tmp_path)
        assert_one_line_error(result, 2)
        assert says in result.stderr, result.stderr
    bigger_limit = jobq(
        "enqueue", "resize", "--payload", f"@{huge}", url=url, cwd=tmp_path, env={"JOBQ_MAX_BODY_BYTES": "3000000"}
    )
    assert bigger_limit.returncode == 0, bigger_limit.stderr  # the same setting as the API's
    nonascii = jobq("enqueue", "resize", "--idempotency-key", "caf\u00e9", url=url, cwd=tmp_path)
    assert_one_line_error(nonascii, 2)
    assert "visible ASCII" in nonascii.stderr


def _nested_text(depth: int) -> str:
    """A JSON object ``depth`` objects deep ({} is 1), as text (built, not dumped: any depth)."""
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


@pytest.mark.slow
def test_every_payload_path_of_the_cli_ends_in_one_line_and_exit_2(tmp_path: Path, sqlite_template: Path):
    """The depth bound on the CLI as in the API (64 taken, 65 refused by the store's rule, far past it
    refused by the reader), bad files (a directory, not UTF-8, empty), a huge payload on stdin,
    and a schedule's payload held to the same rules: each one line on stderr and exit 2."""
    url = sqlite_url_for(tmp_path / "jobq.db")
    (tmp_path / "jobq.db").write_bytes(sqlite_template.read_bytes())
    at, past = tmp_path / "at.json", tmp_path / "past.json"
    at.write_text(_nested_text(64))
    past.write_text(_nested_text(65))
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"s": "caf\u00e9"}'.encode("latin-1"))
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert jobq("enqueue", "resize", "--payload", f"@{at}", url=url, cwd=tmp_path).returncode == 0
    cases = [
        (["enqueue", "resize", "--payload", f"@{past}"], "nested more than 64 objects and arrays deep"),
        (["enqueue", "resize", "--payload", f"@{tmp_path}"], "cannot read"),
        (["enqueue", "resize", "--payload", f"@{latin}"], "is not UTF-8 text"),
        (["enqueue", "resize", "--payload", f"@{empty}"], "is not valid JSON"),
        (["schedule", "add", "nightly", "--cron", "0 3 * * *", "--kind", "resize", "--payload", f"@{past}"], "nested"),
    ]
    for args, says in cases:
        result = jobq(*args, url=url, cwd=tmp_path)
        assert_one_line_error(result, 2)
        assert says in result.stderr, (args, result.stderr)
    huge = json.dumps({"blob": "x" * 2_000_000})
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBQ_")} | {"JOBQ_DATABASE_URL": url}
    for args in (["enqueue", "resize"], ["schedule", "add", "nightly", "--cron", "0 3 * * *", "--kind", "resize"]):
        result = subprocess.run(
            [*JOBQ, *args, "--payload", "-"], input=huge, cwd=tmp_path, env=environ,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert_one_line_error(result, 2)
        assert "over the limit of 1048576 (JOBQ_MAX_BODY_BYTES)" in result.stderr, result.stderr
