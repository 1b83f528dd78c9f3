"""Checks and encodings both stores share, so they reject the same input the same way."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from service.errors import InvalidInput
from service.jobs import JSON, storable_json


# Built once: json.dumps with any option builds a new encoder per call, which costs
# more than encoding a small value.
_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def dump_json(value: JSON, what: str) -> str:
    """JSON text for a payload, checkpoint or result; InvalidInput if it is not JSON
    or holds text one of the databases cannot store."""
    storable_json(value, what)
    try:
        return _COMPACT.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} is not JSON-serialisable: {exc}") from exc


def dump_batch(rows: Sequence[Mapping[str, Any]], values: Sequence[JSON], what: str) -> str:
    """One JSON document for a batch of rows that carry JSON ``values`` (already found
    storable); InvalidInput naming ``what`` and the reason if one of them is not JSON."""
    try:
        return _COMPACT.encode(rows)
    except (TypeError, ValueError) as exc:
        for value in values:
            dump_json(value, what)  # raises for the first culprit, with its own reason
        raise InvalidInput(f"{what} is not JSON-serialisable: {exc}") from exc


def storable_error(error: str) -> str:
    """An error message as both databases can store it: a handler's text is not ours to refuse."""
    return error.replace("\x00", "\\0").encode("utf-8", "backslashreplace").decode("utf-8")


def substring_pattern(text: str | None) -> str | None:
    """A LIKE pattern (escape character backslash) that matches ``text`` anywhere, taken literally."""
    if text is None:
        return None
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def check_progress(done: int | None, total: int | None) -> None:
    if done is not None and (not isinstance(done, int) or isinstance(done, bool) or done < 0):
        raise InvalidInput("done must be a non-negative integer")
    if total is not None and (not isinstance(total, int) or isinstance(total, bool) or total < 0):
        raise InvalidInput("total must be a non-negative integer")
    if done is not None and total is not None and total > 0 and done > total:
        raise InvalidInput(f"done ({done}) cannot exceed total ({total})")


def check_lease_seconds(lease_seconds: float) -> None:
    if not isinstance(lease_seconds, int | float) or not 0 < lease_seconds <= 86_400:
        raise InvalidInput("lease_seconds must be a number in (0, 86400]")


def bucket_counts(rows: Iterable[Mapping[str, Any]], bound_count: int) -> dict[str, list[int]]:
    """Fold ``(kind, bucket, count)`` rows from ``width_bucket`` into a list of counts per kind."""
    counts: dict[str, list[int]] = {}
    for row in rows:
        counts.setdefault(row["kind"], [0] * (bound_count + 1))[int(row["bucket"])] += int(row["count"])
    return counts


MAX_PAGE_SIZE = 1_000


def check_page_size(limit: int) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidInput(f"a page holds 1 to {MAX_PAGE_SIZE} jobs, not {limit!r}")
