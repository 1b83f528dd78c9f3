"""Where each line of claimable jobs begins: the claim's hints, so a pinned xmin horizon
cannot make every claim read the line's dead entries (issue 27).

Every job a claim takes leaves its queued row version in ``ix_jobs_claimable`` until no
snapshot can see it. Behind a session idle in transaction, that is every job claimed since it
began: the oldest keys of each (queue, tenant) line, which the claim's walk passed once per
claim, a heap visit each, to reach the first job still due (5,713 of a claim's 6,285 buffers
after 240 s pinned at 800 jobs/s: docs/PERFORMANCE.md, "bloat").

So the store remembers, per line its claims took from, the head the claim's walk found there
(the line's first due job in that claim's snapshot, whether a limit let it be taken or not),
less ``MARGIN_SECONDS`` of run_after, and the next claim's walk starts that line's probe there
(sql/claim.sql, ``walk``). Its higher priorities are read whole, so a job
of higher priority is never passed over; within the hinted priority, a job below the hint is.

What that gives up, and its bound: a job that becomes due with a key below the hint, at the
hinted priority, waits until the next full walk: within ``FULL_WALK_SECONDS`` on a healthy
server, longer only while full walks are slow (``FULL_WALK_SHARE``). Such a job is
one whose run_after lies more than the margin before the line's head when it is written: an
enqueue that commits more than the margin after its statement began, a ``run_at`` in the past
(the API takes one). Everything else enters at the line's end: enqueues, retries and expired
leases retried (now + backoff), releases by parents and by graceful shutdown, replays (now).
Fairness between tenants and every limit are decided as before, on the heads the walk finds.

A full walk (no hints) every ``FULL_WALK_SECONDS``, or less often while full walks are slow
(``FULL_WALK_SHARE``), finds every such job and starts the hints afresh, from the heads that
claim found; a line none of this worker's claims took from since has no hint and is walked whole. The hints are this process's own: nothing is shared or written.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

FULL_WALK_SECONDS = 1.0
"""How often a claim walks every line from its start (and finds a job the hints passed), while
a full walk is quick."""

FULL_WALK_SHARE = 0.02
"""At most this share of a worker's time goes to full walks: after one that took ``t`` seconds,
the next waits ``max(FULL_WALK_SECONDS, t / FULL_WALK_SHARE)``. A full walk costs what the pin
has left behind (70 ms after 240 s pinned at 800 jobs/s, against 3 ms hinted), and four workers
each spending that every second raised the pickup's p99 5x; so the bound on a job the hints
passed over grows with the pin's damage (3.5 s there), and stays a second on a healthy server."""

MARGIN_SECONDS = 1.0
"""A hint starts this far (in run_after) before the head it was learned from, so an enqueue
that committed up to this long after its statement began is still seen at once."""


NO_HINTS: Mapping[str, list[Any]] = {
    "hint_queues": [],
    "hint_tenants": [],
    "hint_priorities": [],
    "hint_run_afters": [],
}
"""CLAIM_JOBS's hint parameters for a full walk."""


@dataclass(frozen=True)
class Hint:
    priority: int
    run_after: datetime


class LineHeads:
    """The hints of one store's claims: learned from the jobs each claim took, dropped at each
    full walk. Safe across threads (the worker's claimer and finisher both claim)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._hints: dict[tuple[str, str], Hint] = {}
        self._walk_started: float | None = None  # a full walk handed out and not back yet: when
        self._next_walk = 0.0  # when the next claim walks in full (the first one does)

    def params(self) -> dict[str, Any]:
        """The hint arrays for the next claim: empty (a full walk) when one is due."""
        with self._lock:
            now = self._clock()
            if now >= self._next_walk:
                self._walk_started = now
                self._next_walk = now + FULL_WALK_SECONDS
                self._hints.clear()
            lines = sorted(self._hints.items())
        return _arrays(lines)

    def known(self) -> dict[str, Any]:
        """The hints as they are, for the idle poll (HAS_CLAIMABLE), which is no claim: it
        neither starts a full walk nor learns."""
        with self._lock:
            lines = sorted(self._hints.items())
        return _arrays(lines)

    def learn(self, claimed: Iterable[Mapping[str, Any]]) -> None:
        """The head of each line a claim took from (its rows' ``head_priority`` and
        ``head_run_after``), as that line's hint, less the margin; and, after a full walk, when
        the next one is due (``FULL_WALK_SHARE``). Called as each claim returns, empty or not."""
        with self._lock:
            if self._walk_started is not None:
                took = self._clock() - self._walk_started
                self._next_walk = self._walk_started + max(FULL_WALK_SECONDS, took / FULL_WALK_SHARE)
                self._walk_started = None
        heads = {
            (row["queue"], row["tenant"]): Hint(
                row["head_priority"], row["head_run_after"] - timedelta(seconds=MARGIN_SECONDS)
            )
            for row in claimed
            if row["head_run_after"] is not None
        }
        if heads:
            with self._lock:
                self._hints.update(heads)


def _arrays(lines: list[tuple[tuple[str, str], Hint]]) -> dict[str, Any]:
    return {
        "hint_queues": [queue for (queue, _tenant), _hint in lines],
        "hint_tenants": [tenant for (_queue, tenant), _hint in lines],
        "hint_priorities": [hint.priority for _line, hint in lines],
        "hint_run_afters": [hint.run_after for _line, hint in lines],
    }
