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
(``FULL_WALK_SHARE``), finds every such job; when it takes jobs, the hints start afresh from
the heads of the lines it took from. A full walk that takes nothing (other workers emptied the
lines, or limits hold them) leaves the hints as they were: the walk found nothing below them
that it could take, and dropping them made every claim after such a walk a full one until a
claim took something. A hint not learned again for ``KEEP_SECONDS`` is dropped at the next
full walk (or full poll): its line may be gone. A line none of this worker's claims took from
has no hint and is walked whole.

The idle poll (``HAS_CLAIMABLE``) reads the hinted lines as a claim does and every other tenant
whole, and once per full-walk period, while its lines show nothing, every line from its start
(``poll_in_full``): a job it finds there lies below a hint, so the next claim walks in full.
The hints are this process's own: nothing is shared or written.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
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

KEEP_SECONDS = 10.0
"""A hint not learned again for this long is dropped at the next full walk or full poll (its
line may be gone: each hinted line costs every claim and poll three probes)."""

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
    learned: float  # on the store's clock


class LineHeads:
    """The hints of one store's claims: learned from the jobs each claim took, started afresh by
    each full walk that takes jobs. Safe across threads (the worker's claimer and finisher both
    claim)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._hints: dict[tuple[str, str], Hint] = {}
        self._walk_started: float | None = None  # a full walk handed out and not back yet: when
        self._next_walk = 0.0  # when the next claim walks in full (the first one does)
        self._next_full_poll = 0.0  # when the idle poll next reads every line from its start

    def params(self) -> dict[str, Any]:
        """The hint arrays for the next claim: empty (a full walk) when one is due."""
        with self._lock:
            now = self._clock()
            if now >= self._next_walk:
                self._walk_started = now
                self._next_walk = now + FULL_WALK_SECONDS
                self._drop_stale(now)
                return dict(NO_HINTS)
            lines = sorted(self._hints.items())
        return _arrays(lines)

    def learn(self, claimed: Iterable[Mapping[str, Any]]) -> None:
        """The head of each line a claim took from (its rows' ``head_priority`` and
        ``head_run_after``), as that line's hint, less the margin; and, after a full walk, when
        the next one is due (``FULL_WALK_SHARE``). Called as each claim returns, empty or not."""
        claimed = list(claimed)
        with self._lock:
            now = self._clock()
            if self._walk_started is not None:
                self._next_walk = self._walk_started + _period(now - self._walk_started)
                self._walk_started = None
                if claimed:  # the heads it found, for the lines it took from; the others walk whole
                    self._hints.clear()
            self._hints.update(
                {
                    (row["queue"], row["tenant"]): Hint(
                        row["head_priority"], row["head_run_after"] - timedelta(seconds=MARGIN_SECONDS), now
                    )
                    for row in claimed
                    if row["head_run_after"] is not None
                }
            )

    def poll(self, queues: Sequence[str]) -> dict[str, Any]:
        """HAS_CLAIMABLE's lines for the idle poll, which is no claim (it neither starts a full
        walk nor learns): the hinted lines of ``queues``, and the ranges of tenants between them."""
        with self._lock:
            lines = sorted((line, hint) for line, hint in self._hints.items() if line[0] in queues)
        return {**_arrays(lines), **_gaps(queues, lines)}

    def poll_in_full(self, queues: Sequence[str], probe: Callable[[Mapping[str, Any]], bool]) -> bool:
        """After a poll of the hinted lines found nothing: when one is due and hints exist, the
        poll of every line from its start, by ``probe``; what it finds lies below a hint, so
        the next claim walks in full. Timed like the full walks."""
        with self._lock:
            now = self._clock()
            if now < self._next_full_poll:
                return False
            self._drop_stale(now)  # an idle worker's hints go too: its polls are then one probe again
            if not any(queue in queues for queue, _tenant in self._hints):
                return False  # the poll of the hinted lines read every line from its start
        found = probe(every_line(queues))
        with self._lock:
            self._next_full_poll = now + _period(self._clock() - now)
            if found:
                self._next_walk = 0.0
        return found

    def _drop_stale(self, now: float) -> None:
        self._hints = {line: hint for line, hint in self._hints.items() if now - hint.learned < KEEP_SECONDS}


def every_line(queues: Sequence[str]) -> dict[str, Any]:
    """HAS_CLAIMABLE's lines for a poll of every line of ``queues`` from its start."""
    return {**NO_HINTS, **_gaps(queues, [])}


def _period(took: float) -> float:
    """How long after a full walk (or poll) that took ``took`` seconds the next one comes."""
    return max(FULL_WALK_SECONDS, took / FULL_WALK_SHARE)


def _arrays(lines: Sequence[tuple[tuple[str, str], Hint]]) -> dict[str, Any]:
    return {
        "hint_queues": [queue for (queue, _tenant), _hint in lines],
        "hint_tenants": [tenant for (_queue, tenant), _hint in lines],
        "hint_priorities": [hint.priority for _line, hint in lines],
        "hint_run_afters": [hint.run_after for _line, hint in lines],
    }


def _gaps(queues: Sequence[str], lines: Sequence[tuple[tuple[str, str], Hint]]) -> dict[str, Any]:
    """Each queue's tenants outside its hinted lines, as ranges (after, before) between them, in
    tenant order: ('', first hinted), ..., (last hinted, None). Tenant names are never empty."""
    gaps: list[tuple[str, str, str | None]] = []
    for queue in dict.fromkeys(queues):
        bounds = ["", *(tenant for (line_queue, tenant), _hint in lines if line_queue == queue)]
        gaps.extend((queue, after, before) for after, before in zip(bounds, [*bounds[1:], None], strict=True))
    return {
        "gap_queues": [queue for queue, _after, _before in gaps],
        "gap_afters": [after for _queue, after, _before in gaps],
        "gap_befores": [before for _queue, _after, before in gaps],
    }
