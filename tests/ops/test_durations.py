"""Durations as operators type them (no database)."""

from __future__ import annotations

import pytest

from service.durations import format_duration, parse_duration
from service.errors import InvalidInput


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("15m", 900), ("1h", 3_600), ("24h", 86_400), ("42d", 42 * 86_400), ("2w", 1_209_600),
     ("9999w", 9_999 * 604_800)],
)  # fmt: skip
def test_a_number_and_a_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "h", "24", "1h30m", "-5m", "0s", "042d", "1.5h", " 7d", "7d\n", "5y", "1e3s", "99999d", "24 hours"]
)
def test_anything_else_is_refused_naming_the_option(text: str) -> None:
    with pytest.raises(InvalidInput, match="--since"):
        parse_duration(text, name="--since")


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (4.25, "4.2s"), (42, "42s"), (185, "3m05s"), (7_620, "2h07m"), (273_600, "3d04h")],
)
def test_formatted_short(seconds: float, shown: str) -> None:
    assert format_duration(seconds) == shown
