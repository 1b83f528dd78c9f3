"""What the deploy tests share with the run: a check of deploy/ that could not run (kubectl missing,
no root for the network namespaces) is named at the end of every run, not only under ``-rs``, so
that a green run never reads as "deploy/ was checked" when it was not."""

from __future__ import annotations

from typing import Any

import pytest


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    message = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return message.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if r.nodeid.startswith("tests/deploy/")]
    if not skipped:
        return
    terminalreporter.write_sep("!", f"{len(skipped)} deploy checks were SKIPPED", red=True, bold=True)
    for reason in sorted({_reason(r) for r in skipped}):
        terminalreporter.write_line(reason, red=True)
