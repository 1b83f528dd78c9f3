"""The README stays true: its settings table and its test command match the code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from service.config import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
TEST_COMMAND = "python -m pytest -q"


def test_the_settings_table_lists_every_setting() -> None:
    documented = set(re.findall(r"^\| `(JOBQ_[A-Z0-9_]+)` \|", README, flags=re.MULTILINE))
    actual = {f"JOBQ_{name.upper()}" for name in Settings.model_fields}
    assert documented == actual, f"missing from README: {actual - documented}; not settings: {documented - actual}"


def test_the_settings_table_shows_the_defaults() -> None:
    for name, field in Settings.model_fields.items():
        default = field.default
        shown = (
            str(default).lower()
            if isinstance(default, bool)
            else f"{default:g}"
            if isinstance(default, float)
            else str(default)
        )
        assert f"| `JOBQ_{name.upper()}` | `{shown}` |" in README, f"JOBQ_{name.upper()} default {shown}"


def test_ci_runs_the_readme_test_command() -> None:
    assert f"\n    {TEST_COMMAND}\n" in README
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(rf"^{re.escape(TEST_COMMAND)}\b", ci, flags=re.MULTILINE), ".ci/run must run the README's command"


def test_the_periodic_jobs_commands_run_as_written(sqlite_url: str, tmp_path: Path) -> None:
    section = README[README.index("\n### Periodic jobs\n") : README.index("\n## Limits and fairness\n")]
    commands = re.findall(r"^    (jobq schedule .*?)(?:\s+#.*)?$", section, flags=re.MULTILINE)
    assert [c.split()[2] for c in commands] == ["add", "list", "pause", "resume", "delete"]
    env = {
        **os.environ,
        "JOBQ_DATABASE_URL": sqlite_url,
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
    }
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, (command, done.stderr)
        if command.startswith("jobq schedule list"):
            assert "nightly-report  '30 2 * * *' Europe/Berlin  classify on default  next " in done.stdout
