"""Errors as jobq stores them: ``Type: message`` first (what failures group by), then the
end of the traceback (where it broke). Shared by a failed attempt and a failed item."""

from __future__ import annotations

import traceback

MAX_ERROR_CHARS = 8_000
"""Stored errors keep their first line (type and message: what failures group by)
and the end of the traceback (where it broke), cut in the middle past this size."""


def format_error(exc: BaseException, limit: int = MAX_ERROR_CHARS) -> str:
    """``Type: message`` on the first line, then the traceback; cut to ``limit`` characters."""
    message = str(exc).strip()
    head = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    head = head.splitlines()[0] if head else type(exc).__name__
    body = "".join(traceback.format_exception(exc)).rstrip()
    text = f"{head}\n\n{body}"
    if len(text) <= limit:
        return text
    marker = "\n  [... traceback cut ...]\n"
    keep_head = min(len(head) + 2, limit // 4)
    keep_tail = limit - keep_head - len(marker)
    return text[:keep_head] + marker + text[-keep_tail:]
