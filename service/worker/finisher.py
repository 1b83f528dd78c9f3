"""Writing successes in batches, and the threads that run handlers.

:class:`Finisher` — one thread that writes succeeded jobs with the store's
``complete_and_claim``: one fenced statement (one round trip, one commit) for
every result that is waiting, with the claim that refills their slots. It never
waits for a batch to fill: results that arrive while a write is in flight go
together in the next one (group commit), and a lone result on a quiet worker is
written at once. A job keeps its slot, and its heartbeats, until its result is
written; then the slot frees (:class:`service.worker.slots.Slots`), refilled by the
batch's own claim.

It waits only for results it has reason to expect within a window that pays
(:class:`Pace`). Without that, short jobs split into cohorts for good: the jobs
a write refills are handed to their threads as it returns, but cannot finish
before the finisher, still holding the GIL, sends the results that came in
meanwhile; so they finish during that write and make the next one. At
concurrency 4 with no-op jobs the writes alternated between 1 and 3 results (2
a write, measured) where one write could carry all 4. A result that misses the
write in flight waits for its return, a round trip, before its own write
leaves: waiting ``w`` for it instead costs each result already waiting ``w``,
which pays while ``w`` is under a round trip / (results waiting + 1).

Failures, cancellations and hand-backs stay one statement per job, written by
the job's thread: they are rare, and each decides a retry of its own.

:class:`JobThreads` — handlers run on reused threads, at most one per slot,
instead of a new thread per job: a thread's start costs more than a no-op job.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Protocol

from service.errors import InvalidInput
from service.jobs import JSON, ClaimedJob, ClaimRequest, Lease
from service.store.base import COMPLETE_BATCH, Store
from service.worker.context import ParentReads
from service.worker.logs import job_event, log_event
from service.worker.running import Phase, RunningJob
from service.worker.settler import DISCARDED, Settler


@dataclass(frozen=True)
class Success:
    running: RunningJob
    result: JSON
    duration: float
    ran: float  # seconds from the job's hand-off to its thread to its result


class Pace:
    """How long this worker's writes take and its jobs of each kind run (moving averages,
    from the hand-off to the result), and from them the results worth waiting for."""

    SMOOTHING = 0.2
    """The newest sample's weight: a few batches follow a change of load."""

    def __init__(self, round_trip: float | None = None, run_times: Mapping[str, float] | None = None) -> None:
        """Nothing seen yet (None, empty): no result waits."""
        self.round_trip = round_trip
        self.run_times = dict(run_times or {})

    def wrote(self, seconds: float) -> None:
        self.round_trip = _smoothed(self.round_trip, seconds, self.SMOOTHING)

    def ran(self, kind: str, seconds: float) -> None:
        self.run_times[kind] = _smoothed(self.run_times.get(kind), seconds, self.SMOOTHING)

    def window(self, waiting: int) -> float:
        """How long ``waiting`` results may wait for one more (the module docstring says why)."""
        return 0.0 if self.round_trip is None else self.round_trip / (waiting + 1)

    def due(self, held: list[RunningJob], now: float, window: float) -> int:
        """How many running jobs should return within ``window`` of ``now`` (a little late, too:
        run times vary), going by their kind's run time. A job later than that may run for
        minutes: none is waited for."""
        count = 0
        for running in held:
            typical = self.run_times.get(running.job.kind)
            if typical is not None and running.phase is Phase.RUNNING:
                if abs(running.handed + typical - now) <= window:
                    count += 1
        return count


def _smoothed(average: float | None, sample: float, weight: float) -> float:
    return sample if average is None else average + weight * (sample - average)


class FinishedSlots(Protocol):
    """What the finisher asks of the worker's slots (:class:`service.worker.slots.Slots`)."""

    parents: ParentReads | None

    def held(self) -> list[RunningJob]:
        """The jobs holding slots, whose results a batch may wait for (see :class:`Pace`)."""
        ...

    def claim_request(self, count: int) -> ClaimRequest | None:
        """The claim that refills ``count`` slots a batch frees, made in the batch's transaction
        (None: claim nothing, the worker is stopping)."""
        ...

    def fill(self, jobs: list[ClaimedJob], sent: float) -> None:
        """The jobs that claim took start in their slots."""
        ...

    def release(self, running: RunningJob, *, refilled: bool = False) -> None:
        """The job's outcome is written (or cannot be): its slot is free. ``refilled``: the
        batch's own claim already looked for a job for it."""
        ...


class Finisher:
    def __init__(
        self,
        store: Store,
        settler: Settler,
        slots: FinishedSlots,
        *,
        pace: Pace | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``settler`` retries a write while the database is away and fails a job whose result the
        database refused; ``slots`` are the worker's, freed and refilled by each batch."""
        self.store = store
        self.settler = settler
        self.worker_id = settler.worker_id
        self._slots = slots
        # The jobs' contexts read their parents' results from the store the finisher writes to.
        slots.parents = store
        self.pace = pace or Pace()
        self._clock = clock
        self._queue: queue.SimpleQueue[Success] = queue.SimpleQueue()
        self.batches = 0
        self.written = 0

    def put(self, running: RunningJob, result: JSON, duration: float) -> None:
        """Called by the job's thread, which holds FINISHING for the job."""
        self._queue.put(Success(running, result, duration, self._clock() - running.handed))

    def run(self, halt: threading.Event) -> None:
        """Write until ``halt`` is set and nothing is left."""
        while True:
            try:
                first = self._queue.get(timeout=0.1)
            except queue.Empty:
                if halt.is_set():
                    return
                continue
            batch = self._gather(first)
            try:
                self.write(batch)
            except Exception:  # a bug guard: never leave jobs holding their slots
                log_event("worker.finish_error", logging.ERROR, exc_info=True, worker=self.worker_id)
                for success in batch:
                    self._settled(success.running, refilled=False)

    def _gather(self, first: Success) -> list[Success]:
        """The results waiting, and those of running jobs due within the window that pays."""
        batch = [first]
        self._take_waiting(batch)
        now = self._clock()
        window = self.pace.window(len(batch))
        expected = self.pace.due(self._slots.held(), now, window) if window > 0 else 0
        deadline = now + window
        while expected > 0 and len(batch) < COMPLETE_BATCH:
            remaining = deadline - self._clock()
            if remaining <= 0:
                break
            try:
                batch.append(self._queue.get(timeout=remaining))
            except queue.Empty:
                break
            expected -= 1
        self._take_waiting(batch)
        for success in batch:
            self.pace.ran(success.running.job.kind, success.ran)
        return batch

    def _take_waiting(self, batch: list[Success]) -> None:
        while len(batch) < COMPLETE_BATCH:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                return

    def write(self, batch: list[Success]) -> None:
        """One statement for the batch; lost leases are reported, refused results split the batch."""
        self.batches += 1
        request = self._slots.claim_request(len(batch))
        claimed: list[ClaimedJob] = []
        try:
            sent = self._clock()
            lost, claimed = self.settler.persist(lambda: self._complete(batch, request))
        except InvalidInput as exc:
            if len(batch) == 1:
                success = batch[0]
                try:
                    self.settler.refused(
                        success.running, f"InvalidResult: the result was refused: {exc}", success.duration
                    )
                finally:
                    self._settled(success.running, refilled=False)
                return
            for success in batch:  # one result the database refuses must not fail the others
                self.write([success])
            return
        if claimed:
            # The new jobs take their slots before the finished ones give theirs up.
            self._slots.fill(claimed, sent)
        lost_set = set(lost)
        for success in batch:
            job = success.running.job
            if job.lease in lost_set:
                job_event(
                    "job.lease_lost",
                    job,
                    self.worker_id,
                    duration=success.duration,
                    level=logging.WARNING,
                    detail=DISCARDED,
                )
            else:
                self.written += 1
                job_event("job.succeeded", job, self.worker_id, duration=success.duration)
            self._settled(success.running, refilled=request is not None)

    def _complete(self, batch: list[Success], request: ClaimRequest | None) -> tuple[list[Lease], list[ClaimedJob]]:
        """One try: each job's pending progress and item outcomes go with its result, read while
        no heartbeat of the job is in flight (one writer at a time; the keeper skips meanwhile);
        with a request, the claim that refills the batch's slots goes in the same transaction."""
        with ExitStack() as held:
            for success in batch:
                held.enter_context(success.running.writing)
            completions = [s.running.completion(s.result) for s in batch]
            sent = self._clock()
            written: tuple[list[Lease], list[ClaimedJob]]
            if request is None:
                written = self.store.complete_many(completions), []
            else:
                written = self.store.complete_and_claim(completions, request)
            self.pace.wrote(self._clock() - sent)
            return written

    def _settled(self, running: RunningJob, *, refilled: bool) -> None:
        running.finished()
        self._slots.release(running, refilled=refilled)


class JobThreads:
    """Threads that run ``target(item)`` for submitted items, started as needed and then reused."""

    def __init__(self, target: Callable[[RunningJob], None]) -> None:
        self._target = target
        self._queue: queue.SimpleQueue[RunningJob | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._threads: list[threading.Thread] = []

    def submit(self, running: RunningJob) -> None:
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
            else:
                thread = threading.Thread(target=self._loop, name="jobq-job", daemon=True)
                self._threads.append(thread)
                thread.start()
        self._queue.put(running)

    def _loop(self) -> None:
        current = threading.current_thread()
        while True:
            running = self._queue.get()
            if running is None:
                return
            current.name = f"jobq-job-{running.job.id}"
            try:
                self._target(running)
            finally:
                current.name = "jobq-job"
                with self._lock:
                    self._idle += 1

    def stop(self) -> None:
        """Idle threads end; a thread still in a handler ends when the handler returns."""
        with self._lock:
            count = len(self._threads)
            self._threads = []
            self._idle = 0
        for _ in range(count):
            self._queue.put(None)
