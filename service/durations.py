"""Durations as operators type them: ``30s``, ``15m``, ``1h``, ``24h``, ``42d``, ``2w``.

A whole number from 1 to 9999 and one unit, nothing else: ``1h30m``, ``1.5h``,
``-5m``, ``0s``, ``042d`` and a bare ``90`` are refused, so a typo never becomes a
window nobody meant. The CLI (``--since``, ``--window``, ``--older-than``) and the
API (``GET /v1/failures?since=24h``, ``POST /v1/jobs/replay``) share this parser,
and :data:`DURATION_PATTERN` is exactly what it accepts (the API's schema says so).
"""

from __future__ import annotations

import re

from service.errors import InvalidInput

UNIT_SECONDS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}
DURATION_PATTERN = r"^[1-9][0-9]{0,3}[smhdw]$"  # at most 9999 weeks: far from datetime's limits
_DURATION = re.compile(DURATION_PATTERN)


def parse_duration(text: str, *, name: str = "duration") -> float:
    """Seconds in ``text`` (``"24h"`` -> 86400.0). Raises InvalidInput naming ``name``."""
    if not isinstance(text, str) or _DURATION.fullmatch(text) is None:
        raise InvalidInput(
            f"{name} must be a whole number from 1 to 9999 and a unit, s, m, h, d or w "
            f"(e.g. 30s, 15m, 24h, 42d), not {text!r}"
        )
    return float(int(text[:-1]) * UNIT_SECONDS[text[-1]])


def format_duration(seconds: float) -> str:
    """A short human form: ``42s``, ``3m05s``, ``2h07m``, ``3d04h``."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{seconds:.1f}s" if 0 < seconds < 10 else f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"
