"""SQL-side encodings both stores share: a literal LIKE pattern, histogram rows folded.

The rules on the values themselves (storable text and JSON, bounds) are the domain's:
:mod:`service.payloads`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from service.errors import InvalidInput
from service.jobs import ItemOutcome, Lease, error_group
from service.payloads import MAX_ATTEMPTS_LIMIT, check_item_outcome, dump_json, storable_error
from service.retry import Decision, GiveUp, Retry


def item_rows(lease: Lease, items: Sequence[ItemOutcome]) -> list[dict[str, Any]]:
    """The item outcomes a holder writes, as the rows both stores store; each result is
    its JSON text (InvalidInput if it is not JSON), each error storable and grouped."""
    rows = []
    for item in items:
        check_item_outcome(item)
        error = storable_error(item.error) if item.error is not None else None
        rows.append(
            {
                "job_id": str(lease.job_id),
                "item_index": item.index,
                "state": item.state.value,
                "result": dump_json(item.result, "item result"),
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


def retry_params(decision: Decision) -> tuple[bool, float]:
    """A failure's retry decision as the fail statements take it: (queue again?, delay in seconds)."""
    if isinstance(decision, GiveUp):
        return False, 0.0
    if not isinstance(decision, Retry):
        raise InvalidInput(f"a failure needs a retry decision (Retry or GiveUp), not {type(decision).__name__}")
    delay = decision.delay_seconds
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay < math.inf:
        raise InvalidInput("a retry's delay must be a finite number of seconds, at least 0")
    return True, float(delay)


def check_reap_delays(delays: Sequence[float]) -> list[float]:
    """The reaper's delays, one per attempt number up to MAX_ATTEMPTS_LIMIT (RetryPolicy.delays_by_attempt)."""
    values = list(delays)
    if len(values) != MAX_ATTEMPTS_LIMIT:
        raise InvalidInput(f"reap needs one delay per attempt number 1..{MAX_ATTEMPTS_LIMIT}, not {len(values)}")
    for delay in values:
        retry_params(Retry(delay))
    return [float(delay) for delay in values]
