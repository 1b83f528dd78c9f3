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
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from service import items as item_rule
from service.errors import InvalidInput, TooManyItemFailures
from service.jobs import JSON, ClaimedJob, ItemOutcome, ItemState, JobItem, NewJob
from service.payloads import DEFAULT_MAX_PAYLOAD_BYTES, check_progress, dump_json, dump_payloads, validate_new_job
from service.worker.tracebacks import format_error
from service.workflows import ParentResult, check_dependencies

T = TypeVar("T")

ITEMS_POSITION = "position"
ITEMS_STATE = "state"
ITEMS_OUTCOMES = "outcomes"  # in the checkpoint: the handler records item outcomes, which say what is done
ITEM_ERROR_CHARS = 2_000
"""A failed item's stored error: its first line and the end of its traceback, cut past this size."""
SNAPSHOT_EVERY_SECONDS = 0.2
"""``items()`` copies ``ctx.state`` into the checkpoint at most this often (and after the last item)."""


MAX_CHILDREN = 10_000
"""Jobs one handler may enqueue with its result (``ctx.enqueue``): one transaction writes them."""


class ParentReads(Protocol):
    """What the context reads for ``ctx.parent_results()`` (the store)."""

    def parent_results(self, job_id: uuid.UUID) -> list[ParentResult]: ...


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
    items: tuple[ItemOutcome, ...] = ()  # item outcomes recorded since the last flush, in order


@dataclass
class ItemScope:
    """What ``with ctx.item(index) as item:`` gives the block: set ``item.result``."""

    index: int
    result: JSON = None


class JobContext:
    """The handler's view of one attempt of one job.

    - ``job_id``: use it as the idempotency key of every side effect (an attempt
      can run twice when a worker loses its lease while still working).
    - ``attempt``, ``max_attempts``, ``payload``, ``kind``, ``queue``, ``tenant``, ``worker_id``.
    - ``progress(done, total=None)`` and ``checkpoint(state)``: saved with the next heartbeat.
    - ``last_checkpoint``: what the previous attempt saved (``None`` on a first run).
    - ``items(sequence)`` with ``state``: resumable item-by-item work.
    - ``map(sequence, fn)``, ``enumerate(sequence)``, ``item(index)``, ``item_done``,
      ``item_failed``: an outcome per item (ok with a result, or failed with an error),
      written with the heartbeats; failed items do not fail the job (see ``max_item_failures``).
    - ``should_stop``, ``stop_reason``, ``raise_if_stopped()``, ``wait(seconds)``,
      ``await sleep(seconds)``: learning that the job must stop.
    - ``parent_results()``: the results of the job's parents (a workflow's fan-in), one read.
    - ``enqueue(kind, payload, ...)``: a follow-up job, written in the same transaction as this
      job's result and fenced like it (an attempt that lost its lease writes neither).
    """

    def __init__(
        self,
        job: ClaimedJob,
        worker_id: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_item_failures: item_rule.ItemFailureLimit = None,
        parents: ParentReads | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        """``max_payload_bytes``: the store's bound on a payload, which ``enqueue`` applies at once."""
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
        self._item_limit = max_item_failures
        self._refused: str | None = None  # why the store refused what the handler recorded (see refuse)
        self._outcomes: dict[int, ItemState] = {}  # every outcome known now: earlier ones and this attempt's
        self._ok_results: dict[int, JSON] = {}
        self._pending_items: list[ItemOutcome] = []
        self._first_errors: list[str] = []
        self._mine: set[int] = set()  # indexes this attempt recorded
        self._parent_reads = parents
        self._parents: list[ParentResult] | None = None
        self._children: list[NewJob] = []
        self._max_payload_bytes = max_payload_bytes
        self.state: dict[str, JSON] = _restored_state(job.checkpoint)
        """Handler state that ``items()`` saves with each checkpoint and gives back on resume.
        Keep it JSON (dicts, lists, strings, numbers)."""

    def __repr__(self) -> str:
        return f"JobContext({self.kind} {self.job_id} attempt {self.attempt})"

    # -- workflows -----------------------------------------------------------------------
    def parents(self) -> list[ParentResult]:
        """The job's parents with their states and results, oldest first (one read, then kept)."""
        if self._parents is None:
            if self._parent_reads is None:
                raise InvalidInput("this context reads no parents (a worker's contexts do)")
            self._parents = self._parent_reads.parent_results(self.job_id)
        return list(self._parents)

    def parent_results(self) -> dict[uuid.UUID, JSON]:
        """The parents' results by parent id, oldest parent first; None for a parent that did
        not succeed (a job submitted with on_parent_failure="run"). One query for all of them."""
        return {parent.id: parent.result for parent in self.parents()}

    def enqueue(
        self,
        kind: str,
        payload: dict[str, JSON] | None = None,
        *,
        depends_on: Sequence[uuid.UUID | int] = (),
        **fields: Any,
    ) -> int:
        """Add a follow-up job, written with this job's result in one transaction, fenced like
        it: if this attempt lost its lease, neither is written; a job that succeeds always has
        its children, once (each child's idempotency key defaults to this job's id and the
        child's number, so a job that runs again writes none twice). ``depends_on``: stored
        job ids, or the numbers ``enqueue`` returned for earlier children. Returns this
        child's number. The child belongs to this job's tenant. A child every other producer's
        enqueue would refuse is refused here, at once (InvalidInput, PayloadTooLarge), by the same
        rules (service.payloads), not later with the result."""
        fields.setdefault("idempotency_key", f"jobq-child:{self.job_id}:{len(self._children)}")
        child = NewJob(kind=kind, payload=payload or {}, tenant=self.tenant, depends_on=tuple(depends_on), **fields)
        validate_new_job(child)
        dump_payloads([child.payload], self._max_payload_bytes)
        with self._lock:
            if len(self._children) >= MAX_CHILDREN:
                raise InvalidInput(f"a handler may enqueue at most {MAX_CHILDREN} jobs")
            check_dependencies([*self._children, child])
            self._children.append(child)
            return len(self._children) - 1

    def children(self) -> tuple[NewJob, ...]:
        """The follow-up jobs enqueued so far (the finisher writes them with the result)."""
        with self._lock:
            return tuple(self._children)

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
        then. Keep per-item results in ``ctx.state``, or record them as item outcomes
        (``map``, ``item``, ``item_done``)::

            labels = ctx.state.setdefault("labels", [])
            for text in ctx.items(ctx.payload["texts"]):
                labels.append(model(text))
            return {"labels": labels}

        Once the job records item outcomes, what is done is what has an outcome: a
        later attempt skips exactly those items (a replay of failed items, too).
        Raises :class:`JobStopped` before the next item once the job must stop.
        Do not mix with hand-written ``checkpoint()`` calls in the same handler.
        """
        for _index, item in self.enumerate(sequence):
            yield item

    def enumerate(self, sequence: Sequence[T]) -> Iterator[tuple[int, T]]:
        """``items()`` with each item's index, for ``with ctx.item(index):``."""
        if not isinstance(self.state, dict):
            raise InvalidInput("ctx.state must stay a dict (a JSON object)")
        total = len(sequence)
        todo: Sequence[int]
        if self._outcomes or _records_outcomes(self.last_checkpoint):
            todo = self._begin_outcome_run(total)
        else:
            todo = range(min(_items_position(self.last_checkpoint), total), total)
        finished = total - len(todo)
        self.progress(finished, total)
        for index in todo:
            self.raise_if_stopped()
            yield index, sequence[index]
            finished += 1
            self._record_item(index + 1, finished, total)

    def map(self, sequence: Sequence[T], fn: Callable[[T], JSON]) -> list[JSON]:
        """The common case in one line: ``return ctx.map(ctx.payload["rows"], enrich)``.

        Calls ``fn`` on each item that has no outcome yet; its return value is the item's
        result, an exception its error (recorded; the loop goes on). Returns the results
        of every item that succeeded, this attempt's and earlier ones', in item order.
        """
        for index, item in self.enumerate(sequence):
            with self.item(index) as scope:
                scope.result = fn(item)
        with self._lock:
            return [self._ok_results[i] for i in sorted(self._ok_results) if i < len(sequence)]

    @contextmanager
    def item(self, index: int) -> Iterator[ItemScope]:
        """``with ctx.item(index) as item: item.result = work(x)``: ok with ``item.result``
        when the block ends; an exception raised in it is recorded as the item's error,
        caught here, and the loop goes on (a stop request is not an item's error)."""
        scope = ItemScope(index)
        try:
            yield scope
        except JobStopped:
            raise
        except Exception as exc:
            if self._stop_reason is not None:
                raise  # it raised because the job was told to stop
            self.item_failed(index, exc)
            return
        if not self._recorded_now(index):
            self.item_done(index, scope.result)

    def item_done(self, index: int, result: JSON = None) -> None:
        """Item ``index`` succeeded with ``result`` (any JSON, copied now); written with the next heartbeat."""
        snapshot = json.loads(dump_json(result, f"the result of item {index}"))
        self._record_outcome(ItemOutcome(index, ItemState.OK, result=snapshot))

    def item_failed(self, index: int, error: str | BaseException) -> None:
        """Item ``index`` failed; ``error`` is a message or the exception. Raises
        :class:`~service.errors.TooManyItemFailures` once more items failed than the kind allows."""
        text = format_error(error, ITEM_ERROR_CHARS) if isinstance(error, BaseException) else str(error)
        if not text.strip():
            raise InvalidInput(f"item {index} failed with an empty error")
        exceeded = self._record_outcome(ItemOutcome(index, ItemState.FAILED, error=text))
        if exceeded is not None:
            raise exceeded

    @property
    def items_ok(self) -> int:
        with self._lock:
            return sum(1 for state in self._outcomes.values() if state is ItemState.OK)

    @property
    def items_failed(self) -> int:
        with self._lock:
            return sum(1 for state in self._outcomes.values() if state is ItemState.FAILED)

    def _begin_outcome_run(self, total: int) -> list[int]:
        """The indexes this attempt runs: those without an outcome, and the failed ones when
        the earlier failures are past the limit (this attempt retries an attempt that failed for it)."""
        with self._lock:
            failed = [i for i, state in self._outcomes.items() if state is ItemState.FAILED and i not in self._mine]
            if failed and item_rule.exceeded(self._item_limit, len(failed), total):
                for index in failed:
                    del self._outcomes[index]
            return [i for i in range(total) if i not in self._outcomes]

    def _record_outcome(self, outcome: ItemOutcome) -> TooManyItemFailures | None:
        """Keep ``outcome`` for the next heartbeat; the limit's error if this failure passed it."""
        index = outcome.index
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise InvalidInput(f"an item index must be a non-negative integer, not {index!r}")
        with self._lock:
            if index in self._outcomes:
                raise InvalidInput(f"item {index} already has an outcome ({self._outcomes[index].value})")
            self._outcomes[index] = outcome.state
            self._mine.add(index)
            self._pending_items.append(outcome)
            self._version += 1
            if outcome.state is ItemState.OK:
                self._ok_results[index] = outcome.result
                return None
            if len(self._first_errors) < item_rule.FIRST_ERRORS:
                self._first_errors.append(f"item {index}: {(outcome.error or '').splitlines()[0]}")
            failed = sum(1 for state in self._outcomes.values() if state is ItemState.FAILED)
            if not item_rule.exceeded(self._item_limit, failed, self._total):
                return None
            assert self._item_limit is not None  # exceeded() says so
            return TooManyItemFailures(failed, self._total, self._item_limit, list(self._first_errors))

    def _recorded_now(self, index: int) -> bool:
        with self._lock:
            return index in self._mine

    def resume_items(self, earlier: Iterable[JobItem]) -> None:
        """The worker's side: the outcomes earlier attempts stored, read before the handler starts."""
        with self._lock:
            for item in earlier:
                self._outcomes[item.index] = item.state
                if item.state is ItemState.OK:
                    self._ok_results[item.index] = item.result

    def _record_item(self, position: int, finished: int, total: int) -> None:
        now = self._clock()
        if position < total and now - self._last_snapshot < SNAPSHOT_EVERY_SECONDS:
            self.progress(finished, total)
            return
        self._last_snapshot = now
        saved: dict[str, JSON] = {ITEMS_POSITION: position, ITEMS_STATE: self.state}
        with self._lock:
            if self._outcomes:
                saved[ITEMS_OUTCOMES] = True
        snapshot = json.loads(dump_json(saved, "ctx.state"))
        with self._lock:
            self._done = finished
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
    def refuse(self, error: str) -> None:
        """The store refused what this attempt recorded (an item's result over JOBQ_MAX_RESULT_BYTES):
        the attempt fails for good when the handler returns, whatever it returns (the first error kept)."""
        with self._lock:
            if self._refused is None:
                self._refused = error

    @property
    def refused(self) -> str | None:
        with self._lock:
            return self._refused

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
                items=tuple(self._pending_items),
            )

    def flushed(self, pending: Pending) -> None:
        """The heartbeat carrying ``pending`` was written."""
        with self._lock:
            self._flushed_version = max(self._flushed_version, pending.version)
            if pending.has_checkpoint and pending.version == self._version:
                self._has_new_checkpoint = False
            # Outcomes are only appended, and one writer flushes at a time (RunningJob.writing):
            # the first ones are the ones written.
            del self._pending_items[: len(pending.items)]


def _items_position(checkpoint: JSON | None) -> int:
    if isinstance(checkpoint, dict):
        position = checkpoint.get(ITEMS_POSITION)
        if isinstance(position, int) and not isinstance(position, bool) and position >= 0:
            return position
    return 0


def _records_outcomes(checkpoint: JSON | None) -> bool:
    return isinstance(checkpoint, dict) and checkpoint.get(ITEMS_OUTCOMES) is True


def _restored_state(checkpoint: JSON | None) -> dict[str, JSON]:
    if isinstance(checkpoint, dict) and ITEMS_POSITION in checkpoint:
        state = checkpoint.get(ITEMS_STATE)
        if isinstance(state, dict):
            return state
    return {}
