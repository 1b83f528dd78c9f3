"""What a handler gets: :class:`JobContext`.

Everything here is local and cheap: ``progress()`` and ``checkpoint()`` only
record the latest values under a lock; the worker's lease keeper writes them to
the database with the next heartbeat (one statement per job; at most about
``flush_seconds`` after a change). A handler never holds a database connection
through its context.

A stop request (cancel, lease lost, timeout, shutdown) is cooperative for sync
handlers: they see ``ctx.should_stop`` (or ``ctx.wait()`` returning early, or
``ctx.items()``/``ctx.raise_if_stopped()`` raising :class:`JobStopped`). An
async handler's task is also cancelled.
"""

from __future__ import annotations

import asyncio
import enum
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from service.errors import InvalidInput
from service.jobs import JSON, ClaimedJob
from service.payloads import check_progress, dump_json

T = TypeVar("T")

ITEMS_POSITION = "position"
ITEMS_STATE = "state"
SNAPSHOT_EVERY_SECONDS = 0.2
"""``items()`` copies ``ctx.state`` into the checkpoint at most this often (and after the last item)."""


class StopReason(enum.StrEnum):
    CANCELLED = "cancelled"  # someone asked to cancel the job
    LEASE_LOST = "lease_lost"  # the job was reclaimed (another worker may run it): the result will be discarded
    TIMEOUT = "timeout"  # the kind's timeout passed
    SHUTDOWN = "shutdown"  # the worker is stopping and handed the job back to the queue


class JobStopped(Exception):  # noqa: N818 - a signal, not an error
    """Raised inside a handler by ``raise_if_stopped()`` and ``items()`` once the job must stop.

    Let it propagate: the worker records the stop for what it was (cancelled,
    handed back, timed out) and never as the handler's failure.
    """

    def __init__(self, reason: StopReason) -> None:
        super().__init__(f"job told to stop: {reason.value}")
        self.reason = reason


@dataclass(frozen=True)
class Pending:
    """Progress not yet written, as the lease keeper takes it for one heartbeat."""

    done: int | None
    total: int | None
    checkpoint: JSON | None
    has_checkpoint: bool
    version: int


class JobContext:
    """The handler's view of one attempt of one job.

    - ``job_id``: use it as the idempotency key of every side effect (an attempt
      can run twice when a worker loses its lease while still working).
    - ``attempt``, ``max_attempts``, ``payload``, ``kind``, ``queue``, ``tenant``, ``worker_id``.
    - ``progress(done, total=None)`` and ``checkpoint(state)``: saved with the next heartbeat.
    - ``last_checkpoint``: what the previous attempt saved (``None`` on a first run).
    - ``items(sequence)`` with ``state``: resumable item-by-item work.
    - ``should_stop``, ``stop_reason``, ``raise_if_stopped()``, ``wait(seconds)``,
      ``await sleep(seconds)``: learning that the job must stop.
    """

    def __init__(self, job: ClaimedJob, worker_id: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.job_id: uuid.UUID = job.id
        self.kind = job.kind
        self.queue = job.queue
        self.tenant = job.tenant
        self.attempt = job.attempt
        self.max_attempts = job.max_attempts
        self.payload: dict[str, JSON] = job.payload
        self.worker_id = worker_id
        self._clock = clock
        self._lock = threading.Lock()
        self._done: int = job.done
        self._total: int | None = job.total
        self._checkpoint: JSON | None = job.checkpoint
        self._has_new_checkpoint = False
        self._version = 0  # grows at every progress/checkpoint change
        self._flushed_version = 0
        self._last_snapshot = float("-inf")
        self._stop = threading.Event()
        self._stop_reason: StopReason | None = None
        self._stop_callbacks: list[Callable[[], None]] = []
        self.state: dict[str, JSON] = _restored_state(job.checkpoint)
        """Handler state that ``items()`` saves with each checkpoint and gives back on resume.
        Keep it JSON (dicts, lists, strings, numbers)."""

    def __repr__(self) -> str:
        return f"JobContext({self.kind} {self.job_id} attempt {self.attempt})"

    # -- progress and checkpoints ------------------------------------------------------
    def progress(self, done: int, total: int | None = None) -> None:
        """Record progress (``done`` of ``total`` items); written with the next heartbeat."""
        with self._lock:
            check_progress(done, total if total is not None else self._total)
            self._done = done
            if total is not None:
                self._total = total
            self._version += 1

    def checkpoint(self, state: JSON) -> None:
        """Save where the job is, so a later attempt can resume from ``last_checkpoint``.

        The value is copied now (later changes to ``state`` are not saved) and
        written with the next heartbeat.
        """
        snapshot = json.loads(dump_json(state, "checkpoint"))
        with self._lock:
            self._checkpoint = snapshot
            self._has_new_checkpoint = True
            self._version += 1

    @property
    def last_checkpoint(self) -> JSON | None:
        """The latest checkpoint: this attempt's own, else the one the job was claimed with."""
        with self._lock:
            return self._checkpoint

    @property
    def done(self) -> int:
        with self._lock:
            return self._done

    @property
    def total(self) -> int | None:
        with self._lock:
            return self._total

    def items(self, sequence: Sequence[T]) -> Iterator[T]:
        """Yield the items after the last checkpoint, recording progress as it goes.

        After each item (when the loop asks for the next one) the position, and a
        copy of ``ctx.state``, become the checkpoint; a reclaimed job starts at the
        first item whose turn had not been recorded, with ``ctx.state`` as it was
        then. Keep per-item results in ``ctx.state``::

            labels = ctx.state.setdefault("labels", [])
            for text in ctx.items(ctx.payload["texts"]):
                labels.append(model(text))
            return {"labels": labels}

        Raises :class:`JobStopped` before the next item once the job must stop.
        Do not mix with hand-written ``checkpoint()`` calls in the same handler.
        """
        if not isinstance(self.state, dict):
            raise InvalidInput("ctx.state must stay a dict (a JSON object)")
        total = len(sequence)
        start = min(_items_position(self.last_checkpoint), total)
        self.progress(start, total)
        for index in range(start, total):
            self.raise_if_stopped()
            yield sequence[index]
            self._record_item(index + 1, total)

    def _record_item(self, position: int, total: int) -> None:
        now = self._clock()
        if position < total and now - self._last_snapshot < SNAPSHOT_EVERY_SECONDS:
            self.progress(position, total)
            return
        self._last_snapshot = now
        snapshot = json.loads(dump_json({ITEMS_POSITION: position, ITEMS_STATE: self.state}, "ctx.state"))
        with self._lock:
            self._done = position
            self._total = total
            self._checkpoint = snapshot
            self._has_new_checkpoint = True
            self._version += 1

    # -- stopping --------------------------------------------------------------------
    @property
    def should_stop(self) -> bool:
        """True once the job must stop (see ``stop_reason``)."""
        return self._stop.is_set()

    @property
    def stop_reason(self) -> StopReason | None:
        return self._stop_reason

    def raise_if_stopped(self) -> None:
        """Raise :class:`JobStopped` if the job must stop."""
        reason = self._stop_reason
        if reason is not None:
            raise JobStopped(reason)

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; return True at once if the job must stop."""
        return self._stop.wait(max(0.0, seconds))

    async def sleep(self, seconds: float) -> bool:
        """``await ctx.sleep(s)``: like ``wait`` for async handlers (their task is also cancelled on stop)."""
        deadline = self._clock() + max(0.0, seconds)
        while not self._stop.is_set():
            remaining = deadline - self._clock()
            if remaining <= 0:
                return False
            await asyncio.sleep(min(remaining, 0.05))
        return True

    # -- the worker's side -------------------------------------------------------------
    def request_stop(self, reason: StopReason) -> bool:
        """Tell the handler to stop. The first reason wins; returns False if already stopping."""
        with self._lock:
            if self._stop_reason is not None:
                return False
            self._stop_reason = reason
            callbacks = list(self._stop_callbacks)
        self._stop.set()
        for callback in callbacks:
            callback()
        return True

    def on_stop(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when a stop is requested (at once if it already was)."""
        with self._lock:
            if self._stop_reason is None:
                self._stop_callbacks.append(callback)
                return
        callback()

    def pending(self) -> Pending | None:
        """Progress changed since the last flush, or None."""
        with self._lock:
            if self._version == self._flushed_version:
                return None
            return Pending(
                done=self._done,
                total=self._total,
                checkpoint=self._checkpoint if self._has_new_checkpoint else None,
                has_checkpoint=self._has_new_checkpoint,
                version=self._version,
            )

    def flushed(self, pending: Pending) -> None:
        """The heartbeat carrying ``pending`` was written."""
        with self._lock:
            self._flushed_version = max(self._flushed_version, pending.version)
            if pending.has_checkpoint and pending.version == self._version:
                self._has_new_checkpoint = False


def _items_position(checkpoint: JSON | None) -> int:
    if isinstance(checkpoint, dict):
        position = checkpoint.get(ITEMS_POSITION)
        if isinstance(position, int) and not isinstance(position, bool) and position >= 0:
            return position
    return 0


def _restored_state(checkpoint: JSON | None) -> dict[str, JSON]:
    if isinstance(checkpoint, dict) and ITEMS_POSITION in checkpoint:
        state = checkpoint.get(ITEMS_STATE)
        if isinstance(state, dict):
            return state
    return {}
