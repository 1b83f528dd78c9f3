"""Writing successes in batches, and the threads that run handlers.

:class:`Finisher` — one thread that writes succeeded jobs with the store's
``complete_many``: one fenced statement (one round trip, one commit) for every
result that is waiting. It never waits for a batch to fill: a lone result is
written at once, and results that arrive while a write is in flight go together
in the next one (group commit). So a quiet worker finishes a job as fast as
before, and a busy one pays one commit for many jobs. A job keeps its slot, and
its heartbeats, until its result is written; then the slot frees and the claim
loop is woken.

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
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

from service.errors import InvalidInput
from service.jobs import JSON, ClaimedJob, ClaimRequest, Lease
from service.store.base import COMPLETE_BATCH, Store
from service.worker.logs import job_event, log_event
from service.worker.running import RunningJob
from service.worker.settler import DISCARDED, Settler


@dataclass(frozen=True)
class Success:
    running: RunningJob
    result: JSON
    duration: float


class Finisher:
    def __init__(
        self,
        store: Store,
        settler: Settler,
        *,
        done: Callable[[RunningJob], None],
        refill: Callable[[int], ClaimRequest | None] | None = None,
        start: Callable[[list[ClaimedJob], float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``settler`` retries a write while the database is away and fails a job whose result the
        database refused; ``done`` frees the job's slot once its outcome is written (or cannot be).
        ``refill(n)`` asks for the claim that refills the n slots a batch frees (None: claim nothing,
        the worker is stopping), made in the same transaction as the batch; ``start`` runs what it claimed."""
        self.store = store
        self.settler = settler
        self.worker_id = settler.worker_id
        self._done = done
        self._refill = refill
        self._start = start
        self._clock = clock
        self._queue: queue.SimpleQueue[Success] = queue.SimpleQueue()
        self.batches = 0
        self.written = 0

    def put(self, running: RunningJob, result: JSON, duration: float) -> None:
        """Called by the job's thread, which holds FINISHING for the job."""
        self._queue.put(Success(running, result, duration))

    def run(self, halt: threading.Event) -> None:
        """Write until ``halt`` is set and nothing is left."""
        while True:
            try:
                first = self._queue.get(timeout=0.1)
            except queue.Empty:
                if halt.is_set():
                    return
                continue
            batch = [first]
            while len(batch) < COMPLETE_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self.write(batch)
            except Exception:  # a bug guard: never leave jobs holding their slots
                log_event("worker.finish_error", logging.ERROR, exc_info=True, worker=self.worker_id)
                for success in batch:
                    self._settled(success.running)

    def write(self, batch: list[Success]) -> None:
        """One statement for the batch; lost leases are reported, refused results split the batch."""
        self.batches += 1
        request = self._refill(len(batch)) if self._refill is not None and self._start is not None else None
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
                    self._settled(success.running)
                return
            for success in batch:  # one result the database refuses must not fail the others
                self.write([success])
            return
        if claimed:
            # The new jobs take their slots before the finished ones give theirs up: the claim
            # loop, woken by each freed slot, then finds none free and claims nothing.
            self._start(claimed, sent)  # type: ignore[misc]  # set whenever request was
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
            self._settled(success.running)

    def _complete(self, batch: list[Success], request: ClaimRequest | None) -> tuple[list[Lease], list[ClaimedJob]]:
        """One try: each job's pending progress and item outcomes go with its result, read while
        no heartbeat of the job is in flight (one writer at a time; the keeper skips meanwhile);
        with a request, the claim that refills the batch's slots goes in the same transaction."""
        with ExitStack() as held:
            for success in batch:
                held.enter_context(success.running.writing)
            completions = [s.running.completion(s.result) for s in batch]
            if request is None:
                return self.store.complete_many(completions), []
            return self.store.complete_and_claim(completions, request)

    def _settled(self, running: RunningJob) -> None:
        running.finished()
        self._done(running)


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
