"""Durations as operators type them: ``30s``, ``15m``, ``1h``, ``24h``, ``42d``, ``2w``.

One number (whole or decimal) and one unit, nothing else: ``1h30m``, ``-5m``,
``0s`` and a bare ``90`` are refused, so a typo never becomes a window nobody
meant. The CLI (``--since``, ``--window``, ``--older-than``) and the API
(``GET /v1/failures?since=24h``, ``POST /v1/jobs/replay``) share this parser.
"""

from __future__ import annotations

import re

from service.errors import InvalidInput

UNIT_SECONDS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}
MAX_SECONDS = 3_660 * 86_400  # ten years and a bit: far past any retention, far from datetime's limits
DURATION_PATTERN = r"^\s*\d+(\.\d+)?\s*[smhdw]\s*$"
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*")


def parse_duration(text: str, *, name: str = "duration") -> float:
    """Seconds in ``text`` (``"24h"`` -> 86400.0). Raises InvalidInput naming ``name``."""
    match = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidInput(
            f"{name} must be a number and a unit, s, m, h, d or w (e.g. 30s, 15m, 24h, 42d), not {text!r}"
        )
    seconds = float(match.group(1)) * UNIT_SECONDS[match.group(2)]
    if not 0 < seconds <= MAX_SECONDS:
        raise InvalidInput(f"{name} must be more than 0 and at most {MAX_SECONDS // 86_400}d, not {text!r}")
    return seconds


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
