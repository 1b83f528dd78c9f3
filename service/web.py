"""What the API and the console share: the request dependencies, long polls, instants.

Both are mounted on one app by :func:`service.app.create_app`, whose lifespan puts
the settings, the store, the clock and the watcher on ``app.state``; the
dependencies below read them from there (nothing is a module-level global). This
module imports neither ``service.api`` nor ``service.console``: they import it.

Poll hint (the brief's "every second for the first ten seconds, then every
five"): a job younger than ``FAST_PHASE_SECONDS`` by its ``created_at`` (the
database clock) gets 1 s, an older one 5 s, a terminal one none. The API
compares ``created_at`` with its clock, injectable so tests pin time; hosts
whose clocks drift a little only move the switch-over a little.

Long poll (``GET /v1/jobs/{id}?wait=S``, and the console's job page): the request
registers interest in the job with a :class:`Watcher`, reads it, and sleeps until
the watcher says the job may have changed, then reads it again, until its state
or progress differs from where it started or S runs out (:func:`wait_for_change`).

- :class:`NotifyWatcher` (PostgreSQL): ONE listener thread per API process, on
  one dedicated connection, LISTENs on ``JOB_CHANGED`` and wakes only the
  requests waiting on the job named in each notification. A reconnect answers
  ``"*"`` (notifications may have been lost) and wakes every waiter, which
  then re-reads. No request polls the table.
- :class:`PollingWatcher` (SQLite, or PostgreSQL with notifications off): no
  notifications exist, so a waiting request re-reads every
  ``POLL_INTERVAL_SECONDS``.

Shutdown: a long poll would hold the server's shutdown for up to ``MAX_WAIT_SECONDS``
(past compose's 15 s stop grace). :class:`Stopping` is set when the server is told to
stop (``jobq serve``'s SIGTERM); every long poll then answers at once with the job as it
stands (its Retry-After tells the client when to ask again, of another process).
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Annotated, Any, Protocol, TypeVar

from fastapi import Depends, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from service.config import Settings
from service.jobs import JobStatus, Notification
from service.store import Store
from service.store.base import JOB_CHANGED, Listener

T = TypeVar("T")

log = logging.getLogger("jobq.api")

FAST_PHASE_SECONDS = 10.0
FAST_POLL_SECONDS = 1
SLOW_POLL_SECONDS = 5
MAX_WAIT_SECONDS = 30.0
POLL_INTERVAL_SECONDS = 0.2
MAX_TAG_LENGTH = 200
"""The longest change tag a client may send back (If-None-Match, the console's ``tag``):
:func:`change_tag` makes far shorter ones; a longer one is a 422 (or the route's, from a fast path)."""


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


# -- the request dependencies -------------------------------------------------------------
# These four only read app.state, so they are ``async def``: FastAPI runs a plain ``def``
# dependency in its thread pool, and four thread hand-offs cost a status poll more than its query.
async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


async def get_watcher(request: Request) -> Watcher:
    watcher: Watcher = request.app.state.watcher
    return watcher


class Stopping:
    """Set once when the server begins to stop: long polls answer at once. Thread- and
    signal-safe to set (:meth:`begin`); waited on from the event loop."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None  # the app's, from its lifespan

    def begin(self) -> None:
        if self.loop is None or self.loop.is_closed():
            return  # not serving (yet or any more): no poll to end
        self.loop.call_soon_threadsafe(self.event.set)

    def is_set(self) -> bool:
        return self.event.is_set()


async def get_stopping(request: Request) -> Stopping:
    stopping: Stopping = request.app.state.stopping
    return stopping


async def get_now(request: Request) -> datetime:
    """This request's "now", from the app's clock (pinned in tests)."""
    clock: Callable[[], datetime] = request.app.state.clock
    return clock()


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[Store, Depends(get_store)]
WatcherDep = Annotated[Watcher, Depends(get_watcher)]
NowDep = Annotated[datetime, Depends(get_now)]
StoppingDep = Annotated[Stopping, Depends(get_stopping)]


async def blocking(function: Callable[..., T], *args: object) -> T:
    """Run a store call (synchronous, may wait on the database) off the event loop."""
    return await run_in_threadpool(function, *args)


# -- results --------------------------------------------------------------------------------
RESULT_CHUNK_BYTES = 262_144
"""A result is streamed in chunks of this size: one statement each, a chunk of memory per reader
(measured: 8 readers of an 8 MiB result raised the API's peak RSS by 7 MiB; 1 MiB chunks, 48)."""


class ResultVanished(Exception):
    """A result's row went away in the middle of its streamed answer (the connection is cut)."""


async def streamed_result(store: Store, job_id: uuid.UUID, tenant: str | None) -> StreamingResponse:
    """``{"job_id": …, "result": …}`` for a succeeded job, streamed from the database a chunk at a
    time with its Content-Length: the stored JSON text as it is, never parsed here, so a reader
    costs a chunk of memory whatever the result's size and however many read at once. Raises
    what ``store.result_size`` raises (JobNotFound; InvalidTransition before success)."""
    stored = await blocking(store.result_size, job_id, tenant)
    head = b'{"job_id":"' + str(job_id).encode() + b'","result":'
    tail = b"}"

    async def body() -> AsyncIterator[bytes]:
        yield head
        offset = 0
        while offset < stored.size:
            chunk = await blocking(store.read_result_chunk, stored.result_id, offset, RESULT_CHUNK_BYTES)
            if not chunk:  # pruned while it was read: end short, so the client sees a cut body, not a wrong one
                raise ResultVanished(f"the result of job {job_id} was deleted while it was read")
            offset += len(chunk)
            yield chunk
        yield tail

    length = len(head) + stored.size + len(tail)
    return StreamingResponse(body(), media_type="application/json", headers={"Content-Length": str(length)})


# -- long polls ---------------------------------------------------------------------------
async def wait_for_change(
    job_id: uuid.UUID,
    tenant: str | None,
    store: Store,
    watcher: Watcher,
    wait: float,
    known: str | None,
    stopping: Stopping | None = None,
) -> JobStatus:
    """The job's status once its state or progress differs from ``known`` (or from its first read),
    or after ``wait`` seconds, or as it stands once the server begins to stop (``stopping``).
    ``tenant`` None: any tenant's job (the operator console)."""
    deadline = time.monotonic() + wait
    # Watch before the first read: a change between the two is then never missed.
    with watcher.watch(str(job_id)) as waiter:
        status = await blocking(store.get, job_id, tenant)
        baseline = known or change_tag(status)
        while not status.state.terminal and change_tag(status) == baseline:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (stopping is not None and stopping.is_set()):
                break
            if await _wait_unless_stopping(waiter, remaining, stopping):
                status = await blocking(store.get, job_id, tenant)
    return status


async def _wait_unless_stopping(waiter: Waiter, timeout: float, stopping: Stopping | None) -> bool:
    """The waiter's answer, or False as soon as the server begins to stop."""
    if stopping is None:
        return await waiter.wait(timeout)
    changed = asyncio.ensure_future(waiter.wait(timeout))
    stopped = asyncio.ensure_future(stopping.event.wait())
    try:
        await asyncio.wait({changed, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (changed, stopped):
            task.cancel()
    return changed.done() and not changed.cancelled() and changed.result()


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


def uses_notifications(settings: Settings) -> bool:
    """Long polls listen for changes on PostgreSQL with NOTIFY on; otherwise they re-read."""
    return settings.notify and settings.database_url.startswith(("postgresql://", "postgres://"))


# -- instants in query parameters ---------------------------------------------------------
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def iso_datetime(value: Any) -> Any:
    """An ISO 8601 / RFC 3339 date-time, not a Unix timestamp (pydantic would take "0.5" as one)."""
    if not isinstance(value, str):
        return value
    text = value.strip().upper()
    if not _ISO_DATE.match(text):
        raise ValueError("must be an ISO 8601 date-time, such as 2030-01-01T12:00:00Z")
    text = re.sub(r"(T\d{2}:\d{2}):60", r"\1:59", text)  # RFC 3339 allows a leap second
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("must be an ISO 8601 date-time, such as 2030-01-01T12:00:00Z") from None
