"""The Python client of the jobq REST API (httpx, synchronous).

    from service.client import Client

    with Client("http://127.0.0.1:8000", token="jobq_…") as jobq:
        job = jobq.submit("classify", {"text": "the parcel arrived broken"})
        jobq.wait(job.id, timeout=120)          # raises JobFailed / JobCancelled
        print(jobq.result(job.id))

Every method returns typed values (:class:`Job`, :class:`Page`) and raises the
exceptions of :mod:`service.errors`, mapped from the API's problem details:

    401 Unauthorized        404 NotFound (JobNotFound for a job)
    409 InvalidTransition (the job's state forbids it) or IdempotencyConflict
    413 PayloadTooLarge     422 InvalidInput     503 StoreUnavailable
    anything else, or no answer at all: ApiError

:meth:`Client.wait` long-polls (``?wait=``) and, if the server answers without
waiting, honours its poll hint; without a hint it polls every second for the
first ten seconds, then every five.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self, cast

import httpx

from service.errors import (
    IdempotencyConflict,
    InvalidInput,
    InvalidTransition,
    JobCancelled,
    JobFailed,
    JobNotFound,
    JobqError,
    NotFound,
    PayloadTooLarge,
    StoreUnavailable,
    Unauthorized,
)
from service.jobs import ItemState, JobState

__all__ = [
    "ApiError",
    "Client",
    "IdempotencyConflict",
    "InvalidInput",
    "InvalidTransition",
    "Item",
    "Job",
    "JobCancelled",
    "JobFailed",
    "JobSpec",
    "NotFound",
    "Page",
    "PayloadTooLarge",
    "StoreUnavailable",
    "Unauthorized",
]

DEFAULT_URL = "http://127.0.0.1:8000"
MAX_LONG_POLL_SECONDS = 30.0
FAST_PHASE_SECONDS = 10.0


class ApiError(JobqError):
    """The API answered with an error the client has no name for, or did not answer."""

    def __init__(self, message: str, status: int | None = None, problem: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.problem = dict(problem or {})


@dataclass(frozen=True)
class Job:
    """A job's status as the API reports it."""

    id: uuid.UUID
    kind: str
    queue: str
    state: JobState
    done: int
    total: int | None
    items_ok: int
    items_failed: int
    attempts: int
    max_attempts: int
    error: str | None
    stale: bool
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    result_url: str | None
    poll_after_seconds: int | None
    etag: str | None = None  # the state-and-progress tag, for long polls

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    @property
    def progress(self) -> float | None:
        """done / total, when the job reported a total."""
        return self.done / self.total if self.total else None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], etag: str | None = None) -> Job:
        return cls(
            id=uuid.UUID(data["job_id"]),
            kind=data["kind"],
            queue=data["queue"],
            state=JobState(data["state"]),
            done=data["done"],
            total=data["total"],
            items_ok=data.get("items_ok", 0),  # absent from an API older than per-item outcomes
            items_failed=data.get("items_failed", 0),
            attempts=data["attempts"],
            max_attempts=data["max_attempts"],
            error=data.get("error"),
            stale=data["stale"],
            cancel_requested=data["cancel_requested"],
            created_at=_time(data["created_at"]),
            started_at=_maybe_time(data.get("started_at")),
            finished_at=_maybe_time(data.get("finished_at")),
            updated_at=_time(data["updated_at"]),
            result_url=data.get("result_url"),
            poll_after_seconds=data.get("poll_after_seconds"),
            etag=etag,
        )


@dataclass(frozen=True)
class Item:
    """One item's outcome: ok with its result, or failed with its error."""

    index: int
    state: ItemState
    result: Any
    error: str | None
    attempt: int
    finished_at: datetime

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Item:
        return cls(
            index=data["index"],
            state=ItemState(data["state"]),
            result=data.get("result"),
            error=data.get("error"),
            attempt=data["attempt"],
            finished_at=_time(data["finished_at"]),
        )


@dataclass(frozen=True)
class JobSpec:
    """One job of :meth:`Client.submit_many`."""

    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    delay_seconds: float | None = None
    total: int | None = None
    concurrency_key: str | None = None
    depends_on: tuple[uuid.UUID | str | int, ...] | None = None
    """Workflows: parent job ids, or (in submit_many) the position of an earlier job of the batch."""
    on_parent_failure: str | None = None  # 'cancel' (the API's default) or 'run'

    def to_json(self) -> dict[str, Any]:
        body = {name: value for name, value in asdict(self).items() if value is not None}
        if self.depends_on is not None:
            body["depends_on"] = [{"index": p} if isinstance(p, int) else str(p) for p in self.depends_on]
        return body


@dataclass(frozen=True)
class Page:
    items: list[Job]
    next_cursor: str | None


class Client:
    """A connection to one jobq API: ``base_url`` defaults to ``$JOBQ_URL`` (else
    http://127.0.0.1:8000), ``token`` to ``$JOBQ_TOKEN``."""

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        base_url = base_url or os.environ.get("JOBQ_URL") or DEFAULT_URL
        token = token if token is not None else os.environ.get("JOBQ_TOKEN")
        headers = {"Accept": "application/json, application/problem+json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.timeout = timeout
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout, transport=transport)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- submitting ---------------------------------------------------------------------
    def submit(
        self,
        kind: str,
        payload: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        delay_seconds: float | None = None,
        total: int | None = None,
        concurrency_key: str | None = None,
        idempotency_key: str | None = None,
        depends_on: Iterable[uuid.UUID | str] | None = None,
        on_parent_failure: str | None = None,
    ) -> Job:
        """Queue a job. With ``idempotency_key``, a retry after a lost answer returns the same job.
        ``depends_on``: parent job ids; the job runs once every one succeeded (see the README's
        Workflows)."""
        spec = JobSpec(
            kind=kind,
            payload=dict(payload or {}),
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            delay_seconds=delay_seconds,
            total=total,
            concurrency_key=concurrency_key,
            depends_on=tuple(depends_on) if depends_on is not None else None,
            on_parent_failure=on_parent_failure,
        )
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
        response = self._request("POST", "/v1/jobs", json=spec.to_json(), headers=headers)
        return Job.from_json(response.json())

    def submit_many(self, jobs: Iterable[JobSpec | Mapping[str, Any]]) -> list[Job]:
        """Queue up to 1,000 jobs in one request, all or none; the answer keeps their order."""
        body = [job.to_json() if isinstance(job, JobSpec) else dict(job) for job in jobs]
        response = self._request("POST", "/v1/jobs/batch", json={"jobs": body})
        return [Job.from_json(item) for item in response.json()["jobs"]]

    # -- reading ------------------------------------------------------------------------
    def get(self, job_id: uuid.UUID | str, *, wait: float | None = None, etag: str | None = None) -> Job:
        """The job's status. With ``wait``, the answer comes when it changes (from ``etag``,
        or from what the server first reads) or after ``wait`` seconds (at most 30)."""
        params: dict[str, Any] = {}
        headers: dict[str, str] = {}
        timeout: float | None = None
        if wait:
            wait = min(wait, MAX_LONG_POLL_SECONDS)
            params["wait"] = f"{wait:.3f}"
            timeout = wait + self.timeout
            if etag:
                headers["If-None-Match"] = etag
        response = self._request(
            "GET", f"/v1/jobs/{job_id}", params=params, headers=headers, timeout=timeout, job_id=job_id
        )
        return Job.from_json(response.json(), etag=response.headers.get("ETag"))

    def wait(self, job_id: uuid.UUID | str, timeout: float | None = None, *, long_poll: bool = True) -> Job:
        """Block until the job is terminal; return it if it succeeded.

        Raises JobFailed (with the job's error) or JobCancelled, and TimeoutError
        when ``timeout`` seconds pass first.
        """
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        job = self.get(job_id)
        while not job.terminal:
            remaining = MAX_LONG_POLL_SECONDS if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"job {job_id} is still {job.state.value} after {timeout:g} s")
            if long_poll:
                asked = min(remaining, MAX_LONG_POLL_SECONDS)
                sent = time.monotonic()
                previous, job = job, self.get(job_id, wait=asked, etag=job.etag)
                held = time.monotonic() - sent >= asked * 0.9
                if job.terminal or held or job.etag != previous.etag:
                    continue  # the server held the request until a change or the wait ran out
            # The server answered at once without news (no long poll there): honour its hint.
            pause = job.poll_after_seconds or _fallback_pause(time.monotonic() - started)
            time.sleep(max(0.0, min(pause, remaining)))
            job = self.get(job_id)
        if job.state is JobState.FAILED:
            raise JobFailed(job.id, job.error, job)
        if job.state is JobState.CANCELLED:
            raise JobCancelled(job.id, job)
        return job

    def result(self, job_id: uuid.UUID | str) -> Any:
        """The succeeded job's result. InvalidTransition (with ``.state``) before that."""
        response = self._request("GET", f"/v1/jobs/{job_id}/result", job_id=job_id)
        return response.json()["result"]

    def list(
        self,
        *,
        state: JobState | str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        created_after: datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page:
        """One page of your jobs, newest first; pass ``page.next_cursor`` for the next."""
        params: dict[str, Any] = {
            "state": state.value if isinstance(state, JobState) else state,
            "kind": kind,
            "queue": queue,
            "created_after": created_after.isoformat() if created_after else None,
            "limit": limit,
            "cursor": cursor,
        }
        response = self._request("GET", "/v1/jobs", params={k: v for k, v in params.items() if v is not None})
        data = response.json()
        return Page(items=[Job.from_json(item) for item in data["items"]], next_cursor=data["next_cursor"])

    def items(
        self, job_id: uuid.UUID | str, state: ItemState | str | None = None, *, page_size: int | None = None
    ) -> Iterator[Item]:
        """The job's item outcomes so far, in item order, page after page (while it runs too:
        the partial results). ``state="failed"`` gives the failed items only."""
        params: dict[str, Any] = {}
        if state is not None:
            params["state"] = state.value if isinstance(state, ItemState) else state
        if page_size is not None:
            params["limit"] = page_size
        while True:
            response = self._request("GET", f"/v1/jobs/{job_id}/items", params=params, job_id=job_id)
            data = response.json()
            yield from (Item.from_json(item) for item in data["items"])
            if data["next_cursor"] is None:
                return
            params["cursor"] = data["next_cursor"]

    # -- changing -----------------------------------------------------------------------
    def cancel(self, job_id: uuid.UUID | str) -> Job:
        """Cancel a queued job now, or ask a running one to stop (``cancel_requested``)."""
        response = self._request("POST", f"/v1/jobs/{job_id}/cancel", job_id=job_id)
        return Job.from_json(response.json())

    # -- plumbing -----------------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        *,
        job_id: uuid.UUID | str | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        try:
            response = self._http.request(
                method, path, timeout=timeout if timeout is not None else self.timeout, **kwargs
            )
        except httpx.TransportError as exc:
            raise ApiError(f"no answer from the jobq API at {self._http.base_url}: {exc}") from exc
        if response.is_success:
            return response
        raise _error_for(response, job_id)


def _error_for(response: httpx.Response, job_id: uuid.UUID | str | None) -> JobqError:
    """The exception of the jobq tree for an error answer (problem details)."""
    try:
        problem = response.json()
        if not isinstance(problem, dict):
            problem = {}
    except ValueError:
        problem = {}
    status = response.status_code
    detail = str(problem.get("detail") or response.reason_phrase or f"HTTP {status}")
    kind = str(problem.get("type", "")).rsplit(":", 1)[-1]
    error: JobqError
    if status == 401:
        error = Unauthorized(detail)
    elif status == 404 and job_id is not None and kind == "not-found":
        error = JobNotFound(job_id)
    elif status == 404:
        error = NotFound(detail)
    elif status == 409 and kind == "idempotency-conflict":
        error = IdempotencyConflict(detail)
    elif status == 409 and kind == "invalid-state":
        error = InvalidTransition(detail, str(problem.get("state", "")))
    elif status == 413:
        error = PayloadTooLarge(detail)
    elif status in (400, 422):
        error = InvalidInput(detail)
    elif status == 503:
        error = StoreUnavailable(detail)
    else:
        error = ApiError(f"HTTP {status}: {detail}", status, problem)
    cast(Any, error).problem = problem  # every error carries the problem details it came from
    return error


def _fallback_pause(waited: float) -> float:
    """No hint from the server: every second for the first ten seconds, then every five."""
    return 1.0 if waited < FAST_PHASE_SECONDS else 5.0


def _time(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _maybe_time(text: str | None) -> datetime | None:
    return _time(text) if text else None
