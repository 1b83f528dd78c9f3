"""From an attempt's outcome to its fenced write: fail (with the retry decision), cancel, hand back.

The third step of run, decide, persist (see :mod:`service.worker.executor`). The
job threads, the finisher (a result the database refuses fails its attempt) and
the worker's shutdown all write through a :class:`Settler`; none of them writes
an outcome of its own. Successes are written in batches by
:mod:`service.worker.finisher`, through :meth:`Settler.persist`.

Every write is fenced on the lease: one that matches nothing (:class:`LeaseLost`)
means the job was reclaimed, and the outcome is discarded and logged. A database
outage only delays a write (:meth:`Settler.persist` retries it), except a
hand-back at shutdown, which gives up at its deadline: the lease then expires and
another worker reaps the job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from service.errors import LeaseLost, StoreUnavailable
from service.jobs import JobState
from service.retry import RetryPolicy
from service.store.base import Store
from service.worker.backoff import Backoff
from service.worker.context import StopReason
from service.worker.executor import Failed, Stopped
from service.worker.health import StoreHealth
from service.worker.logs import job_event, log_event
from service.worker.running import RunningJob

T = TypeVar("T")

_FAIL_EVENTS = {JobState.QUEUED: "job.retrying", JobState.FAILED: "job.failed", JobState.CANCELLED: "job.cancelled"}
DISCARDED = "the fenced write matched nothing: the job was reclaimed; the outcome was discarded"


class Settler:
    def __init__(
        self,
        store: Store,
        worker_id: str,
        health: StoreHealth,
        retry_policy: RetryPolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.health = health
        self.retry_policy = retry_policy
        self.clock = clock

    def persist(self, write: Callable[[], T], *, deadline: float | None = None) -> T:
        """Run a fenced write until it lands or is refused; a database outage only delays it
        (until ``deadline``, if given: then StoreUnavailable)."""
        backoff = Backoff()
        while True:
            try:
                result = write()
            except StoreUnavailable as exc:
                self.health.failed(exc, "finish")
                pause = backoff.next()
                if deadline is not None and self.clock() + pause > deadline:
                    raise
                time.sleep(pause)
                continue
            self.health.ok()
            return result

    def settle(self, running: RunningJob, outcome: Failed | Stopped) -> None:
        """Write a failure or a stop. The caller holds FINISHING and has flushed the job's item
        outcomes (they stay done: the next attempt, or a replay, skips those items)."""
        job = running.job
        duration = self.clock() - running.started
        try:
            if isinstance(outcome, Failed):
                self.fail(running, outcome.error, outcome.retryable, duration)
            elif outcome.reason is StopReason.CANCELLED:
                self.persist(lambda: self.store.acknowledge_cancel(job.lease))
                job_event("job.cancelled", job, self.worker_id, duration=duration)
            elif outcome.reason is StopReason.TIMEOUT:
                error = f"TimeoutError: {job.kind} ran longer than its timeout of {running.spec.timeout:g} s"
                self.fail(running, error, True, duration)
            elif outcome.reason is StopReason.SHUTDOWN:
                self.persist(lambda: self.store.release(job.lease))
                job_event("job.released", job, self.worker_id, duration=duration)
            else:  # LEASE_LOST while finishing: nothing may be written
                job_event("job.lease_lost", job, self.worker_id, duration=duration, level=logging.WARNING)
        except LeaseLost:
            job_event("job.lease_lost", job, self.worker_id, duration=duration, level=logging.WARNING, detail=DISCARDED)
        finally:
            running.finished()

    def refused(self, running: RunningJob, error: str, duration: float) -> None:
        """The database refused a result (too big, say): the attempt fails, not retryable."""
        try:
            self.fail(running, error, False, duration)
        except LeaseLost:
            job_event("job.lease_lost", running.job, self.worker_id, duration=duration, level=logging.WARNING)

    def fail(self, running: RunningJob, error: str, retryable: bool, duration: float) -> None:
        """The failure with the retry decision: again later, or for good. Raises LeaseLost."""
        job = running.job
        # The claim already applied the handler's max_attempts (default and ceiling) to the job.
        decision = self.retry_policy.decide(job.attempt, job.max_attempts, retryable)
        result = self.persist(lambda: self.store.fail(job.lease, error, decision))
        event = _FAIL_EVENTS.get(result.state, "job.failed")
        fields: dict[str, object] = {"error": error.splitlines()[0][:500]}
        if result.run_after is not None:
            fields["run_after"] = result.run_after.isoformat()
        level = logging.ERROR if event == "job.failed" else logging.WARNING
        job_event(event, job, self.worker_id, duration=duration, level=level, **fields)

    def hand_back(self, running: RunningJob, deadline: float) -> None:
        """At shutdown: release a job still running so another worker takes it at once. The
        caller holds FINISHING and has flushed the job's item outcomes."""
        duration = self.clock() - running.started
        try:
            self.persist(lambda: self.store.release(running.job.lease), deadline=deadline)
            job_event("job.released", running.job, self.worker_id, duration=duration)
        except LeaseLost:
            job_event("job.lease_lost", running.job, self.worker_id, level=logging.WARNING, duration=duration)
        except StoreUnavailable:
            log_event(
                "job.release_failed",
                logging.WARNING,
                worker=self.worker_id,
                job_id=str(running.job.id),
                detail="the database did not answer; the lease will expire and another worker reaps it",
            )
        finally:
            running.finished()
