"""The reaper: running jobs whose lease expired go back to the queue (or fail).

Run by the fleet's leader (service.maintenance.leadership), its writes fenced with the
leader's token; idempotent all the same, so a leader and its successor overlapping for a
moment is harmless. The store's reap statement skips rows another reaper holds (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, the
write lock on SQLite) and touches at most ``batch`` rows, so ``run_once`` repeats
it while whole batches come back, up to ``max_batches``. Expiry is judged by the
database clock, never this host's.
"""

from __future__ import annotations

import logging

from service.jobs import ReapResult
from service.maintenance.leadership import LeaderToken, unfenced
from service.retry import RetryPolicy
from service.store.base import REAP_BATCH, Store

logger = logging.getLogger("jobq.maintenance")


class Reaper:
    def __init__(
        self,
        store: Store,
        policy: RetryPolicy | None = None,
        *,
        batch: int = REAP_BATCH,
        max_batches: int = 20,
        leader: LeaderToken = unfenced,
    ) -> None:
        self.store = store
        self.leader = leader  # the token each batch is fenced with (service.maintenance.leadership)
        self.policy = policy or RetryPolicy()
        self.batch = batch
        self.max_batches = max_batches

    def run_once(self) -> ReapResult:
        """Reap until a batch comes back short (or ``max_batches``); the sum of what was done."""
        requeued = failed = cancelled = 0
        for _ in range(self.max_batches):
            result = self.store.reap(self.policy.delays_by_attempt(), self.batch, leader=self.leader())
            requeued += result.requeued
            failed += result.failed
            cancelled += result.cancelled
            if result.total < self.batch:
                break
        total = ReapResult(requeued=requeued, failed=failed, cancelled=cancelled)
        if total.total:
            logger.info(
                "reaper.reaped",
                extra={"jobq_fields": {"requeued": requeued, "failed": failed, "cancelled": cancelled}},
            )
        return total
