"""The producer API: enqueue and watch jobs from Python, straight on the database.

No API process and no token: a :class:`Queue` opens the store of a database
URL (or of the settings) and applies the rules the REST API applies: the same
validation (:func:`~service.payloads.validate_new_job`; the payload rules and its size limit in the store's enqueue),
the same idempotency rule (:func:`~service.jobs.require_same_job`, applied by the
store's enqueue for every producer) and the same exceptions from :mod:`service.errors`::

    from service import Queue

    with Queue("postgresql://app@db/app") as queue:
        job = queue.enqueue("send_invoice", {"invoice_id": 42}, idempotency_key="invoice-42")
        queue.wait(job.id, timeout=60)           # JobFailed / JobCancelled / TimeoutError
        print(queue.result(job.id))

On PostgreSQL, ``connection=`` enqueues inside the caller's own transaction (a
psycopg connection, or a SQLAlchemy ``Connection`` or ``Session`` on psycopg):
the job exists only if the caller commits, and the workers are woken at that
commit. That is the transactional outbox: the business row and its job commit
or roll back together.

From asyncio (a FastAPI app), :class:`AsyncQueue` has the same operations, awaited::

    async with AsyncQueue() as queue:
        async with await psycopg.AsyncConnection.connect(url) as conn:   # or a SQLAlchemy AsyncSession
            await conn.execute("INSERT INTO orders VALUES (7)")
            job = await queue.enqueue("send_invoice", {"invoice_id": 7}, connection=conn)
        await queue.wait(job.id, timeout=60)

It is not a second implementation (STYLE.md: not the same API twice): it validates through
its :class:`Queue` (one home for the rules), hands the pooled operations to a thread, and sends
an enqueue on the caller's async connection through the store's ``enqueue_many_async``, the
very statements ``Queue`` sends, awaited on the caller's event loop (service.store.postgres.steps).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import fields, replace
from datetime import datetime
from types import TracebackType
from typing import Any

from service.config import Settings, load_settings
from service.errors import InvalidInput, JobCancelled, JobFailed
from service.jobs import JSON, JobPage, JobQuery, JobState, JobStatus, NewJob
from service.payloads import validate_new_job
from service.store import Store, open_store
from service.store.base import JOB_CHANGED
from service.workflows import Workflow, parents_of

_OPTIONS = frozenset(f.name for f in fields(NewJob)) - {"kind", "payload", "tenant"}
_POLL_SECONDS = 0.2
"""How often ``wait`` re-reads the job between wake-ups (SQLite has no wake-ups at all)."""


class Queue:
    """Enqueue, read, wait for and cancel jobs of one tenant, on SQLite or PostgreSQL."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        settings: Settings | None = None,
        tenant: str = "default",
        store: Store | None = None,
    ) -> None:
        """``database_url`` overrides the settings' (default: ``load_settings()``, i.e. the
        ``JOBQ_*`` environment). ``store``: an open store to use instead (not closed here)."""
        if settings is None:
            settings = load_settings() if database_url is None else load_settings(database_url=database_url)
        elif database_url is not None:
            settings = settings.model_copy(update={"database_url": database_url})
        self.settings = settings
        self.tenant = tenant
        self._owns_store = store is None
        self.store = store if store is not None else open_store(self.settings)

    # -- submitting -------------------------------------------------------------------
    def enqueue(
        self,
        kind: str,
        payload: Mapping[str, JSON] | None = None,
        *,
        connection: object | None = None,
        **options: Any,
    ) -> JobStatus:
        """Queue one job; its status (``queued``). ``options``: queue, priority, max_attempts,
        delay_seconds, run_after, total, concurrency_key, idempotency_key, depends_on (parent ids
        or statuses; the job waits until every one succeeded), on_parent_failure (as ``NewJob``).

        With an idempotency key this tenant already used, the first job is returned and
        nothing is added; used for a different job, IdempotencyConflict.
        """
        return self.enqueue_many([self._new_job(kind, payload, options)], connection=connection)[0]

    def enqueue_many(
        self, jobs: Iterable[NewJob | Mapping[str, Any]], *, connection: object | None = None
    ) -> list[JobStatus]:
        """Queue many jobs in one round trip, all or none; the statuses in the order given.
        Each job is a ``NewJob`` or a mapping with ``kind``, ``payload`` and the options.
        A key used for another job: IdempotencyConflict, and none of them is added."""
        return self.store.enqueue_many(self._prepared(jobs), connection=connection)

    def enqueue_workflow(self, workflow: Workflow, *, connection: object | None = None) -> list[JobStatus]:
        """Queue a workflow built with ``chain`` and ``group`` (service.workflows) as one batch,
        all or none; the statuses in the workflow's job order."""
        return self.enqueue_many(workflow.jobs, connection=connection)

    # Placed before ``list``: below it, ``list[...]`` in an annotation names that method.
    def _prepared(self, jobs: Iterable[NewJob | Mapping[str, Any]]) -> list[NewJob]:
        """The jobs as the store takes them, checked (InvalidInput, PayloadTooLarge) before any is sent."""
        return [self._of(job) for job in jobs]

    # -- reading ----------------------------------------------------------------------
    def get(self, job_id: uuid.UUID | str) -> JobStatus:
        """The job's status (never its payload or result). JobNotFound for another tenant's job."""
        return self.store.get(_job_id(job_id), self.tenant)

    def result(self, job_id: uuid.UUID | str) -> JSON:
        """The succeeded job's result; InvalidTransition (``.state``) before that."""
        return self.store.get_result(_job_id(job_id), self.tenant)

    def list(
        self,
        *,
        state: JobState | str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        created_after: datetime | None = None,
        limit: int = 50,
        after: uuid.UUID | None = None,
    ) -> JobPage:
        """This tenant's jobs, newest first; pass ``page.next_after_id`` as ``after`` for the next page."""
        return self.store.list_jobs(
            JobQuery(
                tenant=self.tenant,
                state=JobState(state) if state is not None else None,
                kind=kind,
                queue=queue,
                created_after=created_after,
                limit=limit,
                after_id=after,
            )
        )

    def wait(self, job_id: uuid.UUID | str, timeout: float | None = None) -> JobStatus:
        """Block until the job is terminal; its status if it succeeded.

        Raises JobFailed (with the job's error), JobCancelled, or TimeoutError when
        ``timeout`` seconds pass first. On PostgreSQL it wakes on the job's change
        notifications; it also re-reads every 0.2 s, so a lost notification costs no more.
        """
        parsed = _job_id(job_id)
        deadline = _Deadline(timeout)
        listener = self.store.listen([JOB_CHANGED])
        try:
            status = self.get(parsed)
            while not status.state.terminal:
                listener.wait(deadline.next_wait(status))
                status = self.get(parsed)
        finally:
            listener.close()
        return _ended(status)

    def cancel(self, job_id: uuid.UUID | str) -> JobStatus:
        """Cancel a queued job now; a running one gets ``cancel_requested`` and ends cancelled
        when its worker sees it. InvalidTransition for a finished job."""
        return self.store.cancel(_job_id(job_id), self.tenant)

    # -- lifetime -----------------------------------------------------------------------
    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------
    def _new_job(self, kind: str, payload: Mapping[str, JSON] | None, options: Mapping[str, Any]) -> NewJob:
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise InvalidInput(f"unknown enqueue option(s): {', '.join(unknown)}; known: {', '.join(sorted(_OPTIONS))}")
        given = {name: value for name, value in options.items() if value is not None}
        if "depends_on" in given:  # ids, statuses or batch positions
            given["depends_on"] = parents_of(given["depends_on"])
        if isinstance(payload, Mapping):
            payload = dict(payload)  # a copy: the caller may change its dict after the call
        job = NewJob(kind=kind, payload={} if payload is None else payload, tenant=self.tenant, **given)
        validate_new_job(job)
        return job

    def _of(self, job: NewJob | Mapping[str, Any]) -> NewJob:
        if isinstance(job, NewJob):
            if job.tenant != self.tenant:
                job = replace(job, tenant=self.tenant)  # a Queue speaks for one tenant, as a token does
            validate_new_job(job)
            return job
        if not isinstance(job, Mapping) or "kind" not in job:
            raise InvalidInput("each job is a NewJob or a mapping with a 'kind'")
        options = {name: value for name, value in job.items() if name not in ("kind", "payload")}
        return self._new_job(job["kind"], job.get("payload"), options)


class AsyncQueue:
    """:class:`Queue`'s operations for asyncio code: the same arguments, answers and exceptions,
    awaited. ``connection=`` takes the caller's async connection (psycopg's ``AsyncConnection``,
    or SQLAlchemy's ``AsyncConnection`` or ``AsyncSession`` on ``postgresql+psycopg://``): the
    jobs are inserted in the caller's transaction, on the caller's event loop, and exist only
    if it commits. Without it, each operation is Queue's, run in a thread (one short statement
    on a pooled connection), so the event loop never waits on the database.

    Make it where the application starts (a FastAPI lifespan): opening the store connects."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        settings: Settings | None = None,
        tenant: str = "default",
        store: Store | None = None,
    ) -> None:
        """As :class:`Queue`'s."""
        self.sync = Queue(database_url, settings=settings, tenant=tenant, store=store)
        """The Queue it checks jobs with and runs the pooled operations of, in a thread."""
        self.settings = self.sync.settings
        self.tenant = self.sync.tenant
        self.store = self.sync.store

    # -- submitting -------------------------------------------------------------------
    async def enqueue(
        self,
        kind: str,
        payload: Mapping[str, JSON] | None = None,
        *,
        connection: object | None = None,
        **options: Any,
    ) -> JobStatus:
        """As :meth:`Queue.enqueue`; ``connection`` an async one."""
        return (await self._submit([self.sync._new_job(kind, payload, options)], connection))[0]

    async def enqueue_many(
        self, jobs: Iterable[NewJob | Mapping[str, Any]], *, connection: object | None = None
    ) -> list[JobStatus]:
        """As :meth:`Queue.enqueue_many`; ``connection`` an async one."""
        return await self._submit(self.sync._prepared(jobs), connection)

    async def enqueue_workflow(self, workflow: Workflow, *, connection: object | None = None) -> list[JobStatus]:
        """As :meth:`Queue.enqueue_workflow`: ``chain``/``group`` as one batch, all or none."""
        return await self.enqueue_many(workflow.jobs, connection=connection)

    async def _submit(self, jobs: list[NewJob], connection: object | None) -> list[JobStatus]:
        if connection is None:
            return await asyncio.to_thread(self.store.enqueue_many, jobs)
        return await self.store.enqueue_many_async(jobs, connection=connection)

    # -- reading ----------------------------------------------------------------------
    async def get(self, job_id: uuid.UUID | str) -> JobStatus:
        """As :meth:`Queue.get`."""
        return await asyncio.to_thread(self.sync.get, job_id)

    async def result(self, job_id: uuid.UUID | str) -> JSON:
        """As :meth:`Queue.result`."""
        return await asyncio.to_thread(self.sync.result, job_id)

    async def list(
        self,
        *,
        state: JobState | str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        created_after: datetime | None = None,
        limit: int = 50,
        after: uuid.UUID | None = None,
    ) -> JobPage:
        """As :meth:`Queue.list`."""
        return await asyncio.to_thread(
            self.sync.list,
            state=state,
            kind=kind,
            queue=queue,
            created_after=created_after,
            limit=limit,
            after=after,
        )

    async def wait(self, job_id: uuid.UUID | str, timeout: float | None = None) -> JobStatus:
        """As :meth:`Queue.wait`, without holding a thread while it waits: it re-reads the job
        every 0.2 s (no notification wakes it sooner), and a cancelled task stops waiting."""
        parsed = _job_id(job_id)
        deadline = _Deadline(timeout)
        status = await self.get(parsed)
        while not status.state.terminal:
            await asyncio.sleep(deadline.next_wait(status))
            status = await self.get(parsed)
        return _ended(status)

    async def cancel(self, job_id: uuid.UUID | str) -> JobStatus:
        """As :meth:`Queue.cancel`."""
        return await asyncio.to_thread(self.sync.cancel, job_id)

    # -- lifetime -----------------------------------------------------------------------
    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class _Deadline:
    """``wait``'s timeout, for both queues: how long to wait before the next read of the job."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self.at = None if timeout is None else time.monotonic() + timeout

    def next_wait(self, status: JobStatus) -> float:
        """Seconds until the next read; TimeoutError (naming the job's state) once it has passed."""
        if self.at is None:
            return _POLL_SECONDS
        remaining = self.at - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"job {status.id} is still {status.state.value} after {self.timeout:g} s")
        return min(remaining, _POLL_SECONDS)


def _ended(status: JobStatus) -> JobStatus:
    """A terminal job as ``wait`` answers it: its status if it succeeded, else JobFailed or JobCancelled."""
    if status.state is JobState.FAILED:
        raise JobFailed(status.id, status.error, status)
    if status.state is JobState.CANCELLED:
        raise JobCancelled(status.id, status)
    return status


def _job_id(value: uuid.UUID | str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise InvalidInput(f"not a job id (expected a UUID): {value!r}") from None


__all__ = ["AsyncQueue", "Queue"]
