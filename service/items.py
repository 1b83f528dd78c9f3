"""The item-failure rule of a kind: how many failed items a job may finish with. No I/O.

``max_item_failures`` is a count (an ``int``: at most that many items may fail) or a
ratio (a ``float`` strictly between 0 and 1: at most that share of the job's items).
``None``, the default, sets no limit: every failed item is recorded and kept, and the
job still succeeds. The worker's context asks :func:`exceeded` each time an item fails,
and when an attempt begins (an attempt that starts past the limit is a retry of one that
failed for it, and runs the failed items again).
"""

from __future__ import annotations

from service.errors import InvalidInput

ItemFailureLimit = int | float | None

FIRST_ERRORS = 3
"""How many item errors the error of an attempt that failed past the limit quotes."""


def check_limit(limit: ItemFailureLimit, what: str = "max_item_failures") -> ItemFailureLimit:
    """The limit as given, or InvalidInput: a non-negative int, or a float in (0, 1)."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int | float):
        raise InvalidInput(f"{what} must be a count (an integer) or a ratio (a float between 0 and 1)")
    if isinstance(limit, int) and limit < 0:
        raise InvalidInput(f"{what} must not be negative")
    if isinstance(limit, float) and not 0 < limit < 1:
        raise InvalidInput(f"{what} as a ratio must be between 0 and 1 (exclusive), not {limit}")
    return limit


def exceeded(limit: ItemFailureLimit, failed: int, total: int | None) -> bool:
    """More items failed than the limit allows (a ratio needs the job's total to judge)."""
    if limit is None:
        return False
    if isinstance(limit, float):
        return total is not None and total > 0 and failed > limit * total
    return failed > limit
