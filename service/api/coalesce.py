"""Concurrent status polls share one store read: group commit, for reads.

A poll that finds no read in flight starts one at once, so a lone poll waits for
nothing. Polls that arrive while a read is running queue up and go together in
the next one: under load a batch grows with the load, and the thread hand-off and
the round trip, which cost more than the row, are paid once per batch instead of
once per poll.
"""

from __future__ import annotations

import asyncio

from starlette.concurrency import run_in_threadpool

from service.jobs import JobStatus, StatusRead
from service.store.base import STATUS_READ_BATCH, Store


class CoalescedStatusReads:
    """``await reads.read(StatusRead(...))``: a job's status, or None if the store has none
    for that tenant or token (or could not be read); the caller then asks the long way."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._waiting: list[tuple[StatusRead, asyncio.Future[JobStatus | None]]] = []
        self._reader: asyncio.Task[None] | None = None  # held: the loop keeps only a weak reference

    async def read(self, request: StatusRead) -> JobStatus | None:
        answer: asyncio.Future[JobStatus | None] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, answer))
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read_until_none_wait())
        return await answer

    async def _read_until_none_wait(self) -> None:
        batch: list[tuple[StatusRead, asyncio.Future[JobStatus | None]]] = []
        try:
            while self._waiting:
                batch, self._waiting = self._waiting[:STATUS_READ_BATCH], self._waiting[STATUS_READ_BATCH:]
                try:
                    found = await run_in_threadpool(self._store.read_statuses, [request for request, _ in batch])
                except Exception:  # noqa: BLE001 - each poll falls back to the route, which reports the error
                    found = [None] * len(batch)
                for (_, answer), status in zip(batch, found, strict=True):
                    if not answer.done():
                        answer.set_result(status)
        finally:
            # Cancelled (the server stopping): nobody is left to read for the polls still waiting.
            for _, answer in batch + self._waiting:
                if not answer.done():
                    answer.set_result(None)
            self._waiting = []
            self._reader = None
