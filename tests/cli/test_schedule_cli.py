"""``jobq schedule add/list/pause/resume/delete``: the real command on both stores."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from tests.cli.test_cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Run, assert_one_line_error
from tests.cli.test_cli import run as run  # noqa: F401  (the fixture)
from tests.conftest import Database


def listed(run: Run) -> dict[str, dict[str, object]]:
    result = run("schedule", "list", "--json")
    assert result.returncode == EXIT_OK, result.stderr
    return {row["name"]: row for row in map(json.loads, result.stdout.splitlines())}


def test_a_schedule_is_added_listed_with_its_next_run_paused_resumed_and_deleted(run: Run, db: Database) -> None:
    added = run(
        "schedule",
        "add",
        "digest",
        "--cron",
        "0 7 * * 1",
        "--kind",
        "send_digest",
        "--payload",
        '{"list": "weekly"}',
        "--queue",
        "mail",
        "--timezone",
        "Europe/Berlin",
        "--catch-up",
        "skip",
    )
    assert added.returncode == EXIT_OK, added.stderr
    assert "next run" in added.stderr

    digest = listed(run)["digest"]
    next_run = datetime.fromisoformat(str(digest["next_run_at"]))
    assert next_run > datetime.now(UTC)
    local = next_run.astimezone(ZoneInfo("Europe/Berlin"))
    assert (local.weekday(), local.hour, local.minute) == (0, 7, 0), "Mondays at 07:00 in Berlin"
    assert {k: digest[k] for k in ("cron", "kind", "payload", "queue", "catch_up", "source", "paused")} == {
        "cron": "0 7 * * 1",
        "kind": "send_digest",
        "payload": {"list": "weekly"},
        "queue": "mail",
        "catch_up": "skip",
        "source": "cli",
        "paused": False,
    }
    assert "digest  '0 7 * * 1' Europe/Berlin  send_digest on mail  next " in run("schedule", "list").stdout

    assert run("schedule", "pause", "digest").returncode == EXIT_OK
    assert listed(run)["digest"]["paused"] is True
    assert "paused" in run("schedule", "list").stdout
    assert run("schedule", "resume", "digest").returncode == EXIT_OK
    assert listed(run)["digest"]["paused"] is False

    assert run("schedule", "delete", "digest").returncode == EXIT_OK
    assert db.count("schedules") == 0
    for command in ("delete", "pause", "resume"):
        assert_one_line_error(run("schedule", command, "digest"), EXIT_FAILED)


def test_bad_schedules_are_one_line_and_write_nothing(run: Run, db: Database) -> None:
    for args in (
        ["--cron", "every monday", "--kind", "k"],
        ["--cron", "61 * * * *", "--kind", "k"],
        ["--cron", "* * * * *", "--kind", "k", "--timezone", "Mars/Olympus"],
        ["--cron", "* * * * *", "--kind", "k", "--catch-up", "all"],
        ["--cron", "* * * * *", "--kind", "k", "--payload", "[1]"],
        ["--cron", "* * * * *", "--kind", ""],
    ):
        assert_one_line_error(run("schedule", "add", "x", *args), EXIT_USAGE)
    assert db.count("schedules") == 0
