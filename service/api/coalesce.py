"""Concurrent requests share one store call: group commit, for status reads and for submits.

A request that finds no call in flight starts one at once, so a lone request waits
for nothing. Requests that arrive while a call is running queue up and go together
in the next one: under load a batch grows with the load, and the thread hand-off,
the round trip and (for submits) the commit, which cost more than a row, are paid
once per batch instead of once per request.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from starlette.concurrency import run_in_threadpool

from service.errors import IdempotencyConflict, InvalidInput, StoreUnavailable
from service.jobs import JobStatus, NewJob, StatusRead
from service.store.base import STATUS_READ_BATCH, Store

SUBMIT_BATCH = 100
"""Submits one batch carries at most: a batched submit waits for the whole batch's commit."""

Request = TypeVar("Request")
Answer = TypeVar("Answer")


class _Coalesced(ABC, Generic[Request, Answer]):
    """The queue and the one task that empties it, batch by batch, each batch one call of
    ``_call`` in a worker thread, which answers each request (or raises for it)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._waiting: list[tuple[Request, asyncio.Future[Answer]]] = []
        self._runner: asyncio.Task[None] | None = None  # held: the loop keeps only a weak reference

    async def _ask(self, request: Request) -> Answer:
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, answer))
        if self._runner is None:
            self._runner = asyncio.get_running_loop().create_task(self._run_until_none_wait())
        return await answer

    async def _run_until_none_wait(self) -> None:
        batch: list[tuple[Request, asyncio.Future[Answer]]] = []
        try:
            while self._waiting:
                taken = self._batch_length([request for request, _ in self._waiting])
                batch, self._waiting = self._waiting[:taken], self._waiting[taken:]
                answers = await run_in_threadpool(self._call, [request for request, _ in batch])
                for (_, answer), outcome in zip(batch, answers, strict=True):
                    if answer.done():
                        continue
                    if isinstance(outcome, BaseException):
                        answer.set_exception(outcome)
                    else:
                        answer.set_result(outcome)
        finally:
            # Cancelled (the server stopping): nobody is left to call the store for those still waiting.
            for _, answer in batch + self._waiting:
                if not answer.done():
                    self._unanswered(answer)
            self._waiting = []
            self._runner = None

    @abstractmethod
    def _batch_length(self, waiting: Sequence[Request]) -> int:
        """How many of the waiting requests (at least one) the next call takes."""

    @abstractmethod
    def _call(self, batch: Sequence[Request]) -> Sequence[Answer | BaseException]:
        """The store call for a batch (in a worker thread): an answer or an error per request."""

    @abstractmethod
    def _unanswered(self, answer: asyncio.Future[Answer]) -> None:
        """Settles a request the batches will not answer (the server stopping)."""


class CoalescedStatusReads(_Coalesced[StatusRead, JobStatus | None]):
    """``await reads.read(StatusRead(...))``: a job's status, or None if the store has none
    for that tenant or token (or could not be read); the caller then asks the long way."""

    async def read(self, request: StatusRead) -> JobStatus | None:
        return await self._ask(request)

    def _batch_length(self, waiting: Sequence[StatusRead]) -> int:
        return min(len(waiting), STATUS_READ_BATCH)

    def _call(self, batch: Sequence[StatusRead]) -> Sequence[JobStatus | None]:
        try:
            return self._store.read_statuses(batch)
        except Exception:  # noqa: BLE001 - each poll falls back to the route, which reports the error
            return [None] * len(batch)

    def _unanswered(self, answer: asyncio.Future[JobStatus | None]) -> None:
        answer.set_result(None)


@dataclass(frozen=True)
class Submit:
    """One submit in a batch: the job, the hash of its caller's token (None: ``job.tenant``
    is the caller's, auth off), and its request body's size, which bounds a batch."""

    job: NewJob
    token_hash: str | None
    size: int


class CoalescedSubmits(_Coalesced[Submit, JobStatus]):
    """``await submits.enqueue(Submit(...))``: the stored job's status, as ``store.enqueue(job,
    token_hash=...)`` answers it (its errors raised as it raises them: IdempotencyConflict
    for an Idempotency-Key used for another job).

    A batch goes to the store as one ``enqueue_many`` per token in it (one statement and one
    commit each on PostgreSQL: each token looked up in the statement that inserts its jobs),
    all in one thread hand-off. ``enqueue_many`` is all or none, so one job the store refuses
    (invalid, or its key used for another job) refuses the others of its token's group with
    it, nothing written: then each job of the group is submitted alone, in the same hand-off,
    and gets its own answer, as if it had come alone."""

    def __init__(self, store: Store, max_batch_bytes: int) -> None:
        super().__init__(store)
        self._max_batch_bytes = max_batch_bytes

    async def enqueue(self, submit: Submit) -> JobStatus:
        return await self._ask(submit)

    def _batch_length(self, waiting: Sequence[Submit]) -> int:
        """Up to SUBMIT_BATCH jobs, and no more bodies than one batch request may carry."""
        taken, size = 0, 0
        for submit in waiting[:SUBMIT_BATCH]:
            size += submit.size
            if taken and size > self._max_batch_bytes:
                break
            taken += 1
        return taken

    def _call(self, batch: Sequence[Submit]) -> Sequence[JobStatus | BaseException]:
        groups: dict[str | None, list[int]] = {}
        for index, submit in enumerate(batch):
            groups.setdefault(submit.token_hash, []).append(index)
        answers: dict[int, JobStatus | BaseException] = {}
        for token_hash, indexes in groups.items():
            try:
                statuses = self._store.enqueue_many([batch[i].job for i in indexes], token_hash=token_hash)
            except (InvalidInput, IdempotencyConflict) as exc:
                if len(indexes) == 1:  # its own refusal
                    answers[indexes[0]] = exc
                else:  # one job's refusal, not the others': nothing was written, so each goes again alone
                    answers.update((i, self._alone(batch[i], token_hash)) for i in indexes)
                continue
            except Exception as exc:  # noqa: BLE001 - every submit of the group answers it
                answers.update(dict.fromkeys(indexes, exc))
                continue
            answers.update(zip(indexes, statuses, strict=True))
        return [answers[index] for index in range(len(batch))]

    def _alone(self, submit: Submit, token_hash: str | None) -> JobStatus | BaseException:
        try:
            return self._store.enqueue(submit.job, token_hash=token_hash)
        except Exception as exc:  # noqa: BLE001 - the submit answers it
            return exc

    def _unanswered(self, answer: asyncio.Future[JobStatus]) -> None:
        answer.set_exception(StoreUnavailable("the API is stopping; the job may or may not have been stored"))
