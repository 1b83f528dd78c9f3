"""The worker's slots: which jobs hold them, the claim that fills the free ones, and the wake-up
when one frees. The one owner of "a slot is free, and refilled".

Two parties claim for free slots, both through this object: the claim loop
(:mod:`service.worker.claimer`, for slots free with nothing to finish) and the
finisher (:mod:`service.worker.finisher`, whose batch of results carries the claim that
refills the slots the batch frees). A claimed job takes its slot in :meth:`Slots.fill`
and hands it to its thread; its slot is given back in :meth:`Slots.release` once its
outcome is written (or cannot be). Prefetch is one job per slot: a claim never asks for
more than the slots it fills.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

from service.jobs import ClaimedJob, ClaimRequest, Lease
from service.payloads import DEFAULT_MAX_PAYLOAD_BYTES
from service.worker.context import JobContext, ParentReads
from service.worker.logs import job_event
from service.worker.registry import App
from service.worker.running import RunningJob


class Slots:
    def __init__(
        self,
        app: App,
        request: ClaimRequest,
        concurrency: int,
        *,
        start: Callable[[RunningJob], None],
        clock: Callable[[], float] = time.monotonic,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        """``request``: the worker's claim (its ``limit`` is replaced by the slots to fill);
        ``start`` hands a job that took its slot to a thread; ``max_payload_bytes``: the store's
        bound on a payload, for the jobs' ``ctx.enqueue``."""
        self.app = app
        self.request = request
        self.concurrency = concurrency
        self._start = start
        self._clock = clock
        self._max_payload_bytes = max_payload_bytes
        self._lock = threading.Lock()
        self._running: dict[Lease, RunningJob] = {}
        self.wake = threading.Event()
        """Set when the claim loop should look now: a slot freed, a wake-up, shutdown."""
        self.stopping = threading.Event()
        """Set at shutdown: no more claims, by anyone."""
        self.claimed = 0
        self.parents: ParentReads | None = None
        """Where contexts read parent results (the store; the finisher hands it over)."""

    def held(self) -> list[RunningJob]:
        with self._lock:
            return list(self._running.values())

    @property
    def busy(self) -> int:
        with self._lock:
            return len(self._running)

    @property
    def free(self) -> int:
        return self.concurrency - self.busy

    def claim_request(self, count: int) -> ClaimRequest | None:
        """The claim for ``count`` free slots; None once the worker is stopping (claim nothing)."""
        if self.stopping.is_set():
            return None
        return replace(self.request, limit=count)

    def fill(self, jobs: list[ClaimedJob], sent: float) -> None:
        """Each claimed job takes a slot and goes to its thread (``sent``: when its claim was sent)."""
        for job in jobs:
            spec = self.app.spec(job.kind)
            running = RunningJob(
                job=job,
                spec=spec,
                ctx=JobContext(
                    job,
                    self.request.worker,
                    max_item_failures=spec.max_item_failures,
                    parents=self.parents,
                    max_payload_bytes=self._max_payload_bytes,
                ),
                lease_seconds=spec.lease_seconds or self.request.lease_seconds,
                started=sent,
                handed=self._clock(),
                last_renewed=sent,
            )
            with self._lock:
                # Keyed by the lease, not the job id: this worker may claim a job again (a new
                # attempt) while the thread of its abandoned earlier attempt is still running.
                self._running[job.lease] = running
                self.claimed += 1  # two threads claim: the claim loop and the finisher
            job_event("job.claimed", job, self.request.worker, max_attempts=job.max_attempts)
            self._start(running)

    def release(self, running: RunningJob, *, refilled: bool = False) -> None:
        """The job's slot is free. ``refilled``: the finisher's claim for it (with the job's result)
        already looked for a job, a moment ago; the claim loop would only look again."""
        with self._lock:
            self._running.pop(running.job.lease, None)
        if not refilled:
            self.wake.set()  # a slot is free: claim again at once

    def stop(self) -> None:
        """No more claims; the claim loop wakes to notice."""
        self.stopping.set()
        self.wake.set()
