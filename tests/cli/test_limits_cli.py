"""``jobq limits set/list/delete``: the real command on both stores."""

from __future__ import annotations

import json

from tests.cli.test_cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Run, assert_one_line_error
from tests.cli.test_cli import run as run  # noqa: F401  (the fixture)
from tests.conftest import Database


def test_limits_are_set_listed_and_deleted(run: Run, db: Database) -> None:
    assert run("limits", "set", "tenant:*", "--concurrency", "2").returncode == EXIT_OK
    assert run("limits", "set", "kind:call_model", "--rate", "20/s").returncode == EXIT_OK
    assert run("limits", "set", "tenant:acme", "--concurrency", "8", "--weight", "3").returncode == EXIT_OK
    run("enqueue", "x", "--tenant", "beta")

    listed = json.loads(run("limits", "list", "--json").stdout)
    assert listed["limits"] == [
        {"scope": "kind:call_model", "concurrency": None, "rate": "20/s", "weight": None},
        {"scope": "tenant:*", "concurrency": 2, "rate": None, "weight": None},
        {"scope": "tenant:acme", "concurrency": 8, "rate": None, "weight": 3.0},
    ]
    assert {s["scope"]: s["concurrency"] for s in listed["scopes"]} == {
        "kind:call_model": None,
        "tenant:acme": 8,
        "tenant:beta": 2,
    }
    text = run("limits", "list").stdout
    assert "tenant:acme  concurrency 8  weight 3" in text

    assert run("limits", "delete", "tenant:acme").returncode == EXIT_OK
    assert db.count("limits", "scope = 'tenant:acme'") == 0
    assert_one_line_error(run("limits", "delete", "tenant:acme"), EXIT_FAILED)


def test_bad_limits_are_one_line_and_write_nothing(run: Run, db: Database) -> None:
    # The rules themselves are tested in tests/store/test_limits.py; here, that the CLI says them.
    for args in (["nonsense", "--concurrency", "1"], ["kind:x", "--weight", "2"], ["kind:x", "--rate", "5/week"]):
        assert_one_line_error(run("limits", "set", *args), EXIT_USAGE)
    assert db.count("limits") == 0
