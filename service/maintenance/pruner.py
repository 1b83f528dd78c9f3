"""The pruner: retention for history. Terminal jobs finished longer ago than the
retention go, with their attempts, results and replays.

Safe while workers and the API run: each ``run_once`` is one short statement on
the store that deletes at most ``batch`` of the oldest finished jobs, skipping
rows anyone holds (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; one short write
transaction on SQLite), and never touches a queued or running job. No lock is
held between batches, so a claim or a finish waits at most one batch.
``run_until_done`` repeats it until a batch comes back short: nothing prunable
was left when it ran. Age is judged by the database clock, never this host's.

    Pruner(store, older_than_seconds=42 * 86_400).run_until_done()   # what `jobq prune` does
    Pruner(store, 42 * 86_400, batch=50).run_once()                     # a worker's retention turn

A retention keeps at least a day of history unless forced (:func:`check_retention`, which
``jobq prune`` and ``jobq worker --retention`` call too, before they open the store).

The daily rollup (service.maintenance.rollup) outlives the jobs it counts: a day of it
is a few thousand rows where a day of jobs is a hundred thousand, and the analysts'
day-level questions reach back further than six weeks. It has a retention of its own,
``rollup_older_than_seconds`` (ROLLUP_RETENTION_SECONDS, 400 days, from ``jobq prune`` and
a worker's retention), never shorter than the jobs'; ``prune_rollup`` deletes its whole days.
"""

from __future__ import annotations

import logging
import threading

from service.durations import format_duration
from service.errors import InvalidInput
from service.maintenance.leadership import LeaderToken, unfenced
from service.store.base import PRUNE_BATCH, Store

logger = logging.getLogger("jobq.maintenance")

ROLLUP_RETENTION_SECONDS = 400 * 86_400.0
"""The rollup's retention unless told otherwise: a year and its month to compare."""
MIN_RETENTION_SECONDS = 86_400.0
"""The shortest retention without ``force``. The rollup folds a job a minute after it finishes at
the soonest, later when no worker ran meanwhile: a shorter retention could delete jobs before
they were counted. And an operator who typed 42m rarely meant it."""


def check_retention(
    seconds: float,
    *,
    force: bool = False,
    name: str | None = None,
    remedy: str = "pass force=True if you mean it",
) -> float:
    """``seconds`` if a pruner may keep that little history, else InvalidInput naming ``name``
    (``--older-than 12h``; by default the retention's length) and, under a day, the ``remedy``."""
    if not seconds > 0:
        raise InvalidInput(f"the retention must be more than 0 seconds, not {seconds!r}")
    if seconds < MIN_RETENTION_SECONDS and not force:
        shown = name or f"a retention of {format_duration(seconds)}"
        raise InvalidInput(f"{shown} keeps less than a day of history; {remedy}")
    return seconds


class Pruner:
    def __init__(
        self,
        store: Store,
        older_than_seconds: float,
        *,
        batch: int = PRUNE_BATCH,
        pause_seconds: float = 0.0,
        rollup_older_than_seconds: float | None = None,
        force: bool = False,
        leader: LeaderToken = unfenced,
    ) -> None:
        check_retention(older_than_seconds, force=force)
        if rollup_older_than_seconds is not None and not rollup_older_than_seconds >= older_than_seconds:
            # A rollup day gone while its jobs stay would make the day-level views disagree with the jobs.
            raise InvalidInput("the rollup's retention must be at least the jobs' retention")
        if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= 10_000:
            raise InvalidInput(f"a prune batch deletes 1 to 10000 jobs, not {batch!r}")
        self.store = store
        self.older_than_seconds = older_than_seconds
        self.batch = batch
        self.pause_seconds = pause_seconds
        self.rollup_older_than_seconds = rollup_older_than_seconds
        self.leader = leader  # the token each delete is fenced with (service.maintenance.leadership)

    def run_once(self) -> int:
        """Delete one batch of the oldest prunable jobs; how many were deleted."""
        return self.store.prune(self.older_than_seconds, self.batch, leader=self.leader())

    def run_until_done(self, stop: threading.Event | None = None) -> int:
        """Batches until one comes back short (or ``stop`` is set); how many were deleted in all.

        ``pause_seconds`` between batches leaves room for other writers and for
        replicas to keep up on a large first prune.
        """
        stop = stop or threading.Event()
        deleted = 0
        while not stop.is_set():
            count = self.run_once()
            deleted += count
            if count < self.batch or stop.wait(self.pause_seconds):
                break
        if deleted:
            logger.info(
                "pruner.pruned",
                extra={"jobq_fields": {"deleted": deleted, "older_than_seconds": self.older_than_seconds}},
            )
        return deleted

    def prune_rollup(self) -> int:
        """Delete the rollup's days past its retention (none without one); how many rows went."""
        if self.rollup_older_than_seconds is None:
            return 0
        deleted = self.store.prune_rollup(self.rollup_older_than_seconds, leader=self.leader())
        if deleted:
            logger.info(
                "pruner.rollup_pruned",
                extra={"jobq_fields": {"deleted": deleted, "older_than_seconds": self.rollup_older_than_seconds}},
            )
        return deleted
