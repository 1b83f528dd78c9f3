"""The daily rollup: finished jobs folded into one row per day × tenant × queue × kind.

The analysts' day-level views (``daily_jobs``, ``daily_histogram``, ``daily_queue_wait``, ``daily_run_time``;
docs/ANALYSTS.md) read the rollup instead of six weeks of job rows: a question over
42 days reads a few thousand rollup rows, whatever the history holds. Each row counts
the jobs that finished that UTC day by outcome, with their run time in all and two
histograms: run time (of succeeded jobs: their last attempt's run) and wait (the
first attempt's pickup: due to started, as ``attempt_history.pickup_seconds``).

Run by the fleet's leader, like the reaper, and idempotent all the same. The store
folds one batch of jobs in finish order past a watermark, and moves the watermark,
in one transaction that holds the watermark's row (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, the write lock on SQLite): two workers never fold the same job, and a
crash folds it again from the start, never twice. Only jobs that finished more than
``SETTLE_SECONDS`` ago are folded: a job's ``finished_at`` is its transaction's start,
so a transaction still open when the watermark passes its time would be missed;
a minute is far longer than any statement that finishes a job. A job replayed and
finished again counts again on its new day: the rollup counts finishes.

Histogram buckets are fixed and log-spaced, four to a doubling, from 1/64 s to
about nine hours: a bucket's jobs all took within ±9 % of its middle, which is what
a median or a p95 read from the histogram is. Buckets are numbered by
``width_bucket(seconds, BUCKET_BOUNDS)`` on both stores, and each row stores its
bucket's middle (``BUCKET_SECONDS``), so the views need no arithmetic of their own.
"""

from __future__ import annotations

import logging

from service.maintenance.leadership import LeaderToken, unfenced
from service.store.base import ROLLUP_BATCH, Store

logger = logging.getLogger("jobq.maintenance")

SETTLE_SECONDS = 60.0
"""Jobs that finished less than this long ago wait for the next fold."""

_LOWEST = -24  # 2 ** (-24 / 4) = 1/64 s
_STEPS = 85  # up to 2 ** (60 / 4) s, about nine hours
BUCKET_BOUNDS = [2.0 ** ((_LOWEST + k) / 4) for k in range(_STEPS)]
"""Bucket ``i`` (``width_bucket``: how many bounds are <= the value) holds [bounds[i - 1], bounds[i])."""
BUCKET_SECONDS = [2.0 ** ((_LOWEST + i - 0.5) / 4) for i in range(_STEPS + 1)]
"""The geometric middle of each bucket (the two open-ended ones: as if they were as wide)."""


class Rollup:
    def __init__(
        self, store: Store, *, batch: int = ROLLUP_BATCH, max_batches: int = 5, leader: LeaderToken = unfenced
    ) -> None:
        self.store = store
        self.leader = leader  # the token each fold is fenced with (service.maintenance.leadership)
        self.batch = batch
        self.max_batches = max_batches

    def run_once(self) -> int:
        """Fold until a batch comes back short (or ``max_batches``); how many jobs were folded."""
        folded = 0
        for _ in range(self.max_batches):
            count = self.store.fold_rollup(
                BUCKET_BOUNDS, BUCKET_SECONDS, SETTLE_SECONDS, self.batch, leader=self.leader()
            )
            folded += count
            if count < self.batch:
                break
        if folded:
            logger.info("rollup.folded", extra={"jobq_fields": {"jobs": folded}})
        return folded

    def run_until_done(self) -> int:
        """``run_once`` until nothing is left to fold: a backfill."""
        folded = 0
        while (count := self.run_once()) > 0:
            folded += count
        return folded
