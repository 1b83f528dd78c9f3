"""SQL-side encodings both stores share: a literal LIKE pattern, histogram rows folded.

The rules on the values themselves (storable text and JSON, bounds) are the domain's:
:mod:`service.payloads`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from service.jobs import ItemOutcome, Lease, error_group
from service.payloads import check_item_outcome, check_result_size, dump_json, storable_error


def item_rows(lease: Lease, items: Sequence[ItemOutcome], max_result_bytes: int) -> list[dict[str, Any]]:
    """The item outcomes a holder writes, as the rows both stores store; each result is
    its JSON text (InvalidInput if it is not JSON, ResultTooLarge over ``max_result_bytes``),
    each error storable and grouped."""
    rows = []
    for item in items:
        check_item_outcome(item)
        error = storable_error(item.error) if item.error is not None else None
        rows.append(
            {
                "job_id": str(lease.job_id),
                "item_index": item.index,
                "state": item.state.value,
                "result": check_result_size(
                    dump_json(item.result, "item result"), max_result_bytes, f"the result of item {item.index}"
                ),
                "error": error,
                "error_group": error_group(error) if error is not None else None,
                "attempt": lease.attempt,
            }
        )
    return rows


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
