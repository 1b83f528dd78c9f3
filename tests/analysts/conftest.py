"""Shared by the analysts' tests: the benchmark's figures, printed at the end of the run."""

from __future__ import annotations

from typing import Any

import pytest

BENCHMARK_REPORT = pytest.StashKey[list[str]]()


def benchmark_lines(config: pytest.Config) -> list[str]:
    """Lines for the summary; the benchmark appends to them as it goes."""
    return config.stash.setdefault(BENCHMARK_REPORT, [])


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lines = config.stash.get(BENCHMARK_REPORT, [])
    if lines:
        terminalreporter.write_sep("-", "docs/ANALYSTS.md queries on synthetic history")
        for line in lines:
            terminalreporter.write_line(line)
