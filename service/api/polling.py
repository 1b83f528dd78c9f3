"""When to poll again, and how a long poll learns that a job changed.

Poll hint (the brief's "every second for the first ten seconds, then every
five"): a job younger than ``FAST_PHASE_SECONDS`` by its ``created_at`` (the
database clock) gets 1 s, an older one 5 s, a terminal one none. The API
compares ``created_at`` with its clock, injectable so tests pin time; hosts
whose clocks drift a little only move the switch-over a little.

Long poll (``GET /v1/jobs/{id}?wait=S``): the request registers interest in the
job with a :class:`Watcher`, reads it, and sleeps until the watcher says the
job may have changed, then reads it again, until its state or progress differs
from where it started or S runs out.

- :class:`NotifyWatcher` (PostgreSQL): ONE listener thread per API process, on
  one dedicated connection, LISTENs on ``JOB_CHANGED`` and wakes only the
  requests waiting on the job named in each notification. A reconnect answers
  ``"*"`` (notifications may have been lost) and wakes every waiter, which
  then re-reads. No request polls the table.
- :class:`PollingWatcher` (SQLite, or PostgreSQL with notifications off): no
  notifications exist, so a waiting request re-reads every
  ``POLL_INTERVAL_SECONDS``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Protocol

from service.jobs import JobStatus, Notification
from service.store.base import JOB_CHANGED, Listener, Store

log = logging.getLogger("jobq.api")

FAST_PHASE_SECONDS = 10.0
FAST_POLL_SECONDS = 1
SLOW_POLL_SECONDS = 5
MAX_WAIT_SECONDS = 30.0
POLL_INTERVAL_SECONDS = 0.2


def poll_after_seconds(status: JobStatus, now: datetime) -> int | None:
    """Seconds until the next poll is worth it; None once the job is terminal."""
    if status.state.terminal:
        return None
    age = (now - status.created_at).total_seconds()
    return FAST_POLL_SECONDS if age < FAST_PHASE_SECONDS else SLOW_POLL_SECONDS


def change_tag(status: JobStatus) -> str:
    """What a long poll compares: the job's state, progress and item counts, as an ETag.

    ``updated_at`` is left out on purpose: a heartbeat that only renews the lease
    is not news to someone waiting for progress.
    """
    parts = (
        status.state.value,
        status.done,
        "-" if status.total is None else status.total,
        status.attempts,
        int(status.cancel_requested),
        int(status.stale),
        status.items_ok,
        status.items_failed,
    )
    return 'W/"' + ".".join(str(part) for part in parts) + '"'


class Waiter(Protocol):
    async def wait(self, timeout: float) -> bool:
        """Sleep until the job may have changed (True) or ``timeout`` passes (False)."""
        ...


class Watcher(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def watch(self, job_id: str) -> AbstractContextManager[Waiter]: ...


class _EventWaiter:
    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        self.event.clear()
        return True


class NotifyWatcher:
    """LISTEN on one connection, in one thread, for the whole API process."""

    LISTEN_SLICE_SECONDS = 1.0

    def __init__(self, store: Store) -> None:
        self._store = store
        self._waiters: dict[str, set[_EventWaiter]] = defaultdict(set)  # touched on the loop only
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listener: Listener | None = None

    def start(self) -> None:
        """Call from the event loop (the app's lifespan): the listener connects here."""
        self._loop = asyncio.get_running_loop()
        self._listener = self._store.listen([JOB_CHANGED])
        self._thread = threading.Thread(target=self._run, name="jobq-api-listener", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._listener is not None:
            self._listener.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @contextmanager
    def watch(self, job_id: str) -> Iterator[Waiter]:
        waiter = _EventWaiter()
        self._waiters[job_id].add(waiter)
        try:
            yield waiter
        finally:
            waiters = self._waiters.get(job_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[job_id]

    @property
    def waiting(self) -> int:
        """Requests waiting right now (for tests and metrics)."""
        return sum(len(waiters) for waiters in self._waiters.values())

    def _run(self) -> None:
        assert self._listener is not None and self._loop is not None
        while not self._stopped.is_set():
            try:
                notes = self._listener.wait(self.LISTEN_SLICE_SECONDS)
            except Exception:  # the listener reconnects by itself; this is a bug guard
                log.exception("long-poll listener failed; waking every waiter and retrying")
                notes = [Notification(JOB_CHANGED, "*")]
                self._stopped.wait(1.0)
            if notes and not self._stopped.is_set():
                payloads = {note.payload for note in notes if note.channel == JOB_CHANGED}
                try:
                    self._loop.call_soon_threadsafe(self._dispatch, payloads)
                except RuntimeError:  # the loop closed under us: shutting down
                    return

    def _dispatch(self, payloads: set[str]) -> None:
        if "*" in payloads:
            targets = [w for waiters in self._waiters.values() for w in waiters]
        else:
            targets = [w for payload in payloads for w in self._waiters.get(payload, ())]
        for waiter in targets:
            waiter.event.set()


class _SleepingWaiter:
    def __init__(self, interval: float) -> None:
        self.interval = interval

    async def wait(self, timeout: float) -> bool:
        if timeout < self.interval:
            await asyncio.sleep(timeout)
            return False
        await asyncio.sleep(self.interval)
        return True  # "may have changed": the caller re-reads


class PollingWatcher:
    """No notifications: every waiting request re-reads at a short interval."""

    def __init__(self, interval: float = POLL_INTERVAL_SECONDS) -> None:
        self.interval = interval

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    @contextmanager
    def watch(self, job_id: str) -> Iterator[Waiter]:
        yield _SleepingWaiter(self.interval)
