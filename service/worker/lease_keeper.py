"""The lease keeper: one thread that renews every held lease and flushes progress.

Each renewal is one fenced statement per job that also writes the latest
progress and checkpoint (heartbeat = progress write) and the item outcomes
recorded since the last one. A job is renewed when a
third of its lease has passed since the last renewal, or sooner, about
``flush_seconds`` after its handler reported progress, so that pollers see
progress move. The answer decides the job's fate:

- ``held=False``: the job was reaped or reclaimed. The handler is told to stop
  (``lease_lost``) and whatever it returns is discarded.
- ``cancel_requested``: the handler is told to stop (``cancelled``).

The keeper also enforces the kind's timeout, and gives a handler that was told
to stop ``stop_grace`` seconds before the worker settles the job without it.
A database error never stops the keeper: it backs off and tries again, while
the handlers keep running.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from service.errors import InvalidInput, ResultTooLarge, StoreUnavailable
from service.store.base import Store
from service.worker.backoff import Backoff
from service.worker.context import StopReason
from service.worker.health import StoreHealth
from service.worker.logs import job_event, log_event
from service.worker.running import Phase, RunningJob


class LeaseKeeper:
    def __init__(
        self,
        store: Store,
        worker_id: str,
        held: Callable[[], list[RunningJob]],
        *,
        health: StoreHealth,
        on_overdue: Callable[[RunningJob], None],
        flush_seconds: float = 0.5,
        stop_grace: float = 30.0,
        tick_seconds: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.held = held
        self.health = health
        self.on_overdue = on_overdue
        self.flush_seconds = flush_seconds
        self.stop_grace = stop_grace
        self.tick_seconds = tick_seconds
        self.clock = clock
        self._backoff = Backoff()
        self._retry_at = 0.0
        self.renewals = 0

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.tick_seconds):
            try:
                self.tick()
            except Exception:  # never let the keeper die: held leases would expire
                log_event("keeper.error", logging.ERROR, exc_info=True, worker=self.worker_id)

    def tick(self) -> None:
        """One round over the held jobs."""
        for running in self.held():
            self._enforce_deadlines(running)
        if self.clock() < self._retry_at:
            return
        for running in self.held():
            if not running.renewing or not self._due(running):
                continue
            if not self.renew(running):
                return  # the database is away: the rest waits for the next round

    def _due(self, running: RunningJob) -> bool:
        since = self.clock() - running.last_renewed
        if since >= running.heartbeat_every:
            return True
        return since >= self.flush_seconds and running.ctx.pending() is not None

    def renew(self, running: RunningJob, *, wait: bool = False) -> bool:
        """Renew one lease with the latest progress and item outcomes. False if the database
        did not answer. While the job's completion is being written (it carries them), a
        renewal waits for it with ``wait``, else is left for the next round."""
        if not running.writing.acquire(blocking=wait):
            return True
        try:
            return self._renew(running)
        finally:
            running.writing.release()

    def _renew(self, running: RunningJob) -> bool:
        pending = running.ctx.pending()
        sent = self.clock()
        try:
            beat = self.store.heartbeat(
                running.job.lease,
                running.lease_seconds,
                done=pending.done if pending else None,
                total=pending.total if pending else None,
                checkpoint=pending.checkpoint if pending else None,
                items=pending.items if pending else (),
            )
        except StoreUnavailable as exc:
            self.health.failed(exc, "heartbeat")
            self._retry_at = self.clock() + self._backoff.next()
            return False
        except InvalidInput as exc:
            # Progress the database refused (it was checked when recorded, so this is rare):
            # drop it rather than lose the lease over it. An item's result over the bound
            # fails the attempt for good once the handler returns (JobContext.refuse).
            if isinstance(exc, ResultTooLarge):
                running.ctx.refuse(f"InvalidResult: the result was refused: {exc}")
            log_event(
                "keeper.progress_refused",
                logging.ERROR,
                worker=self.worker_id,
                job_id=str(running.job.id),
                error=str(exc),
            )
            if pending is not None:
                running.ctx.flushed(pending)
            return True
        self.health.ok()
        self._backoff.reset()
        self.renewals += 1
        if not beat.held:
            if running.abandon():  # while FINISHING, the finish write will tell what happened
                running.ctx.request_stop(StopReason.LEASE_LOST)
                job_event(
                    "job.lease_lost",
                    running.job,
                    self.worker_id,
                    duration=self.clock() - running.started,
                    level=logging.WARNING,
                    detail="heartbeat found the lease gone; the handler was told to stop and its result will be discarded",
                )
            return True
        running.last_renewed = sent
        if pending is not None:
            running.ctx.flushed(pending)
        if beat.cancel_requested and running.phase is Phase.RUNNING:
            self._ask_to_stop(running, StopReason.CANCELLED)
        return True

    def _enforce_deadlines(self, running: RunningJob) -> None:
        if running.phase is not Phase.RUNNING:
            return
        now = self.clock()
        timeout = running.spec.timeout
        if timeout is not None and now - running.started > timeout:
            self._ask_to_stop(running, StopReason.TIMEOUT)
        if running.stop_requested_at is not None and now - running.stop_requested_at > self.stop_grace:
            self.on_overdue(running)

    def _ask_to_stop(self, running: RunningJob, reason: StopReason) -> None:
        if running.ctx.request_stop(reason):
            running.stop_requested_at = self.clock()
            job_event(
                "job.stop_requested",
                running.job,
                self.worker_id,
                reason=reason.value,
                duration=self.clock() - running.started,
            )
