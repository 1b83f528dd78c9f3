"""The v1 routes: submit, batch, status (with long poll), result, items, list, cancel; health.

Each route is thin: parse (the schemas), authorise (the tenant dependency), one
store call off the event loop, shape the answer. Every store call is scoped by
the tenant of the token, never by anything in the request, so another tenant's
job is "not found" exactly like a missing one.
"""

from __future__ import annotations

import base64
import binascii
import functools
import uuid
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import BeforeValidator
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.api.answers import job_answer, polled, submitted
from service.api.auth import DEFAULT_TENANT, Caller, unauthorized
from service.api.dependencies import CallerDep, PollerDep, TenantDep, no_unknown_query_parameters
from service.api.problems import problem_responses
from service.api.readiness import readiness
from service.api.schemas import (
    BatchOut,
    BatchSubmit,
    HealthOut,
    ItemPageOut,
    JobPageOut,
    JobResultOut,
    JobSubmit,
)
from service.errors import (
    InvalidInput,
    Unauthorized,
)
from service.jobs import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    ItemQuery,
    ItemState,
    JobQuery,
    JobState,
    JobStatus,
    NewJob,
)
from service.payloads import (
    IDEMPOTENCY_KEY_PATTERN,
    MAX_KEY_LENGTH,
    MAX_NAME_LENGTH,
)
from service.status import ItemOut, JobOut
from service.store import Store
from service.web import (
    MAX_TAG_LENGTH,
    MAX_WAIT_SECONDS,
    NowDep,
    SettingsDep,
    StoppingDep,
    StoreDep,
    WatcherDep,
    blocking,
    iso_datetime,
    poll_after_seconds,
    streamed_result,
    wait_for_change,
)

router = APIRouter(prefix="/v1", tags=["jobs"], dependencies=[Depends(no_unknown_query_parameters)])
health = APIRouter(tags=["health"])

JobId = Annotated[uuid.UUID, Path(description="The job's id (a UUID); anything else is a 422.")]
IdempotencyKey = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=MAX_KEY_LENGTH,
        json_schema_extra={"pattern": IDEMPOTENCY_KEY_PATTERN},
        description="Submit at most once per key (per tenant): the same key and body return the "
        "same job, the same key with another body is a 409. Visible ASCII ('!' to '~'): other "
        "text is a 422 (percent-encode or hash it), so a key names the same job here and in a batch.",
    ),
]
"""Its alphabet is checked where the store validates the job (service.payloads.check_idempotency_key),
so this route and the fast path (service.api.fast_submit) refuse a key with the same answer."""

_POLL_HINT_HEADERS = {
    "Retry-After": {
        "description": "Seconds before polling again is worth it (absent once the job is terminal).",
        "schema": {"type": "integer"},
    },
}


# -- submitting ---------------------------------------------------------------------------


@router.post(
    "/jobs",
    status_code=202,
    response_model=JobOut,
    summary="Submit a job",
    responses={
        202: {
            "description": "Accepted: the job is queued (or, for a repeated Idempotency-Key, it is the same job).",
            "headers": {
                "Location": {"description": "The job's URL.", "schema": {"type": "string"}},
                **_POLL_HINT_HEADERS,
            },
        },
        # 404: a parent in depends_on that is not one of the caller's jobs (workflows).
        **problem_responses(401, 404, 409, 413, 422, 503),
    },
)
async def submit_job(
    body: JobSubmit, caller: CallerDep, store: StoreDep, now: NowDep, idempotency_key: IdempotencyKey = None
) -> Response:
    """Queue one job. Poll the URL in ``Location`` for its progress."""
    # What the fast entrance (fast_submit) leaves to this route: the same store call, made alone
    # (the fast entrance's shares its statement with the submits that arrive with it), the same answer.
    status = await _enqueue(store, caller, body.to_new_job(caller.tenant or DEFAULT_TENANT, idempotency_key))
    return submitted(status, now).response()


@router.post(
    "/jobs/batch",
    status_code=202,
    response_model=BatchOut,
    summary="Submit many jobs at once",
    responses=problem_responses(401, 404, 409, 413, 422, 503),
)
async def submit_batch(body: BatchSubmit, tenant: TenantDep, store: StoreDep, now: NowDep) -> BatchOut:
    """Queue up to 1,000 jobs in one request and one database round trip, all or none.

    More jobs never get here: ``BatchSubmit`` refuses them (422), as its schema's maxItems says;
    a payload over JOBQ_MAX_BODY_BYTES is the store's 413 (``jobs[N].payload``), as everywhere."""
    jobs = [item.to_new_job(tenant, item.idempotency_key) for item in body.jobs]
    statuses = await blocking(store.enqueue_many, jobs)  # a key used for another job: the store's 409
    return BatchOut(jobs=[JobOut.of(status, poll_after_seconds(status, now)) for status in statuses])


@router.api_route("/jobs/batch", methods=["GET", "HEAD"], include_in_schema=False)
async def batch_is_post_only() -> None:
    """Without this, GET /v1/jobs/batch would reach GET /v1/jobs/{job_id} and be a 422."""
    raise StarletteHTTPException(status_code=405)


# -- reading ------------------------------------------------------------------------------


@router.get(
    "/jobs/{job_id}",
    response_model=JobOut,
    summary="A job's status (optionally waiting for a change)",
    responses={
        200: {
            "description": "The job's status. Never the result: fetch result_url for that.",
            "headers": {
                **_POLL_HINT_HEADERS,
                "ETag": {
                    "description": "The job's state and progress; see If-None-Match.",
                    "schema": {"type": "string"},
                },
            },
        },
        **problem_responses(401, 404, 422, 503),
    },
)
async def get_job(
    job_id: JobId,
    poller: PollerDep,
    store: StoreDep,
    watcher: WatcherDep,
    now: NowDep,
    stopping: StoppingDep,
    wait: Annotated[
        float | None,
        Query(
            ge=0,
            le=MAX_WAIT_SECONDS,
            allow_inf_nan=False,
            description="Long poll: answer as soon as the job's state or progress changes, "
            f"or after this many seconds (at most {MAX_WAIT_SECONDS:g}).",
        ),
    ] = None,
    if_none_match: Annotated[
        str | None,
        Header(
            max_length=MAX_TAG_LENGTH,
            description="With ?wait: the ETag you already have; the answer comes when the job no longer matches it.",
        ),
    ] = None,
) -> Response:
    """One indexed read of the job; never its payload or result."""
    if poller.tenant is not None and wait:
        status = await wait_for_change(job_id, poller.tenant, store, watcher, wait, if_none_match, stopping)
    else:  # a plain poll: with a token, the token and the job in one query (as the fast path reads it)
        try:
            status = await blocking(store.get, job_id, poller.tenant, poller.token_hash)
        except Unauthorized:
            raise unauthorized() from None
    return polled(status, now).response()


@router.get(
    "/jobs/{job_id}/result",
    response_model=JobResultOut,
    summary="A succeeded job's result",
    responses=problem_responses(401, 404, 409, 422, 503),
)
async def get_result(job_id: JobId, tenant: TenantDep, store: StoreDep) -> StreamingResponse:
    """The stored result. Before the job succeeded: a 409 that names its state.

    Streamed from the database a chunk at a time with its Content-Length, the stored JSON
    text as it is (never parsed here): a reader costs the API a chunk of memory, whatever
    the result's size (up to JOBQ_MAX_RESULT_BYTES) and however many read at once."""
    return await streamed_result(store, job_id, tenant)


@router.get(
    "/jobs",
    response_model=JobPageOut,
    summary="List your jobs, newest first",
    responses=problem_responses(401, 422, 503),
)
async def list_jobs(
    tenant: TenantDep,
    store: StoreDep,
    now: NowDep,
    state: Annotated[JobState | None, Query(description="Only jobs in this state.")] = None,
    kind: Annotated[str | None, Query(max_length=MAX_NAME_LENGTH)] = None,
    queue: Annotated[str | None, Query(max_length=MAX_NAME_LENGTH)] = None,
    created_after: Annotated[
        datetime | None,
        BeforeValidator(iso_datetime),
        Query(description="Only jobs created after this instant (ISO 8601; UTC if no offset)."),
    ] = None,
    workflow: Annotated[
        uuid.UUID | None,
        Query(description="Only the jobs of this workflow (a job's workflow_id: its root job's id)."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    cursor: Annotated[
        str | None, Query(pattern=CURSOR_PATTERN, description="The next_cursor of the previous page.")
    ] = None,
) -> JobPageOut:
    """Keyset pagination: pages stay fast however deep you go, and never repeat a job."""
    query = JobQuery(
        tenant=tenant,
        state=state,
        kind=kind,
        queue=queue,
        created_after=_aware(created_after),
        limit=limit,
        after_id=decode_cursor(cursor) if cursor is not None else None,
        workflow_id=workflow,
    )
    page = await blocking(store.list_jobs, query)
    return JobPageOut(
        items=[JobOut.of(status, poll_after_seconds(status, now)) for status in page.items],
        next_cursor=encode_cursor(page.next_after_id) if page.next_after_id is not None else None,
    )


@router.get(
    "/jobs/{job_id}/items",
    response_model=ItemPageOut,
    summary="A job's item outcomes so far (partial results), in item order",
    responses=problem_responses(401, 404, 422, 503),
)
async def list_items(
    job_id: JobId,
    tenant: TenantDep,
    store: StoreDep,
    state: Annotated[ItemState | None, Query(description="Only items that ended so: ok or failed.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    cursor: Annotated[
        str | None, Query(pattern=ITEM_CURSOR_PATTERN, description="The next_cursor of the previous page.")
    ] = None,
) -> ItemPageOut:
    """Readable while the job runs: the outcomes written so far (with each heartbeat), paged by
    item index, so a page never repeats an item and a later page finds the items added since."""
    query = ItemQuery(
        job_id=job_id,
        tenant=tenant,
        state=state,
        limit=limit,
        after_index=decode_item_cursor(cursor) if cursor is not None else None,
    )
    page = await blocking(store.list_items, query)
    return ItemPageOut(
        job_id=job_id,
        items=[ItemOut.of(item) for item in page.items],
        next_cursor=encode_item_cursor(page.next_after_index) if page.next_after_index is not None else None,
    )


# -- changing -----------------------------------------------------------------------------


@router.post(
    "/jobs/{job_id}/cancel",
    response_model=JobOut,
    summary="Cancel a job",
    responses={200: {"headers": _POLL_HINT_HEADERS}, **problem_responses(401, 404, 409, 422, 503)},
)
async def cancel_job(job_id: JobId, tenant: TenantDep, store: StoreDep, now: NowDep) -> Response:
    """A queued job is cancelled at once; a running one is asked to stop (cancel_requested)
    and ends cancelled when its worker sees it. A finished job is a 409."""
    status = await blocking(store.cancel, job_id, tenant)
    return job_answer(status, now).response()


# -- health -------------------------------------------------------------------------------


@health.get("/healthz", response_model=HealthOut, summary="The process is up")
async def healthz() -> HealthOut:
    return HealthOut(status="ok")


@health.get(
    "/readyz",
    response_model=HealthOut,
    summary="The database is reachable and its schema is one this release runs on",
    responses=problem_responses(503),
)
async def readyz(settings: SettingsDep, store: StoreDep) -> HealthOut:
    """Ready on a schema at this release's newest migration, or ahead of it with the newer migrations
    marked compatible (a rollback). A schema behind, or ahead and not compatible, is a 503
    ``schema-mismatch`` problem that says which and what to do; an unreachable database a 503
    ``unavailable``. A usable schema is read again every 30 s (service.api.readiness says why)."""
    await blocking(readiness(settings.database_url).check, store)
    return HealthOut(status="ready")


# -- helpers ------------------------------------------------------------------------------


async def _enqueue(store: Store, caller: Caller, job: NewJob) -> JobStatus:
    """The job stored for the caller. With a token, its lookup rides in the insert (as the fast
    entrance's does): a revoked token is refused from its revocation's commit on, and the store
    puts the job in the token's tenant. A key used before must name this very job: the store's
    rule (IdempotencyConflict, a 409, nothing written)."""
    try:
        return await blocking(functools.partial(store.enqueue, job, token_hash=caller.token_hash))
    except Unauthorized:
        raise unauthorized() from None


CURSOR_PATTERN = r"^[A-Za-z0-9_-]{22}$"


def encode_cursor(job_id: uuid.UUID) -> str:
    """Opaque to clients: the URL-safe base64 of the page's last id."""
    return base64.urlsafe_b64encode(job_id.bytes).rstrip(b"=").decode("ascii")


def decode_cursor(cursor: str) -> uuid.UUID:
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        return uuid.UUID(bytes=raw)
    except (binascii.Error, ValueError):
        raise InvalidInput("cursor is not one this API returned; start again without it") from None


# Every string the pattern admits is a cursor (as with the jobs' cursor), so a well-formed
# request is never refused for its cursor: the last item index of the page, in decimal.
ITEM_CURSOR_PATTERN = r"^[0-9]{1,9}$"


def encode_item_cursor(index: int) -> str:
    return str(index)


def decode_item_cursor(cursor: str) -> int:
    return int(cursor)


def _aware(moment: datetime | None) -> datetime | None:
    """In UTC (no offset means UTC); an instant past the calendar's ends is clamped to them."""
    if moment is None:
        return None
    try:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:
        return (datetime.max if moment.year > 1 else datetime.min).replace(tzinfo=UTC)
