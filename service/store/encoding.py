"""SQL-side encodings both stores share: a literal LIKE pattern, histogram rows folded.

The rules on the values themselves (storable text and JSON, bounds) are the domain's:
:mod:`service.payloads`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def substring_pattern(text: str | None) -> str | None:
    """A LIKE pattern (escape character backslash) that matches ``text`` anywhere, taken literally."""
    if text is None:
        return None
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def bucket_counts(rows: Iterable[Mapping[str, Any]], bound_count: int) -> dict[str, list[int]]:
    """Fold ``(kind, bucket, count)`` rows from ``width_bucket`` into a list of counts per kind."""
    counts: dict[str, list[int]] = {}
    for row in rows:
        counts.setdefault(row["kind"], [0] * (bound_count + 1))[int(row["bucket"])] += int(row["count"])
    return counts
