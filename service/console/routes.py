"""The console's pages under ``/ui``: overview, jobs, a job, failures, workers, schedules, login.

Each page is a plain GET whose URL holds everything it shows (filters, the page's
keyset cursor), so it can be bookmarked and shared. Every change (cancel, replay,
login, logout) is a POST that carries the CSRF token (session.py) and answers with
a redirect to a page (POST/redirect/GET), so a reload never repeats it. Every read
and write is a store call, the same ones ``jobq stats``, ``jobq failures`` and
``jobq replay`` make; the console writes no SQL.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.console import session
from service.console.session import Operator
from service.console.views import (
    BUCKETS,
    STATS_CHARTS,
    STATS_RANGES,
    WINDOW_SECONDS,
    bucket_labels,
    duration,
    error_block,
    history,
    id_text,
    percent,
    plain_times,
    queue_rows,
    stats_rows,
    time_tag,
    unserved,
)
from service.durations import parse_duration
from service.errors import InvalidInput, InvalidTransition, JobNotFound, LimitNotFound, StoreUnavailable
from service.explain import explain
from service.jobs import (
    WORKER_ALIVE_SECONDS,
    ItemQuery,
    ItemState,
    JobCount,
    JobQuery,
    JobState,
    JobStatus,
    ReplayFilter,
    id_prefix_range,
)
from service.limits import MAX_CONCURRENCY, MAX_WEIGHT, Limit, check_scope, parse_rate
from service.payloads import MAX_KEY_LENGTH, MAX_NAME_LENGTH
from service.schedules import job_for
from service.web import (
    MAX_TAG_LENGTH,
    MAX_WAIT_SECONDS,
    NowDep,
    SettingsDep,
    StoppingDep,
    StoreDep,
    WatcherDep,
    blocking,
    change_tag,
    iso_datetime,
    streamed_result,
    wait_for_change,
)

console = APIRouter(prefix="/ui", include_in_schema=False)
log = logging.getLogger("jobq.console")

PAGE_SIZE = 50
ITEMS_PAGE_SIZE = 50
LIVE_SECONDS = 5  # how often a live page (data-live parts) reads itself again
PREFIX_MATCHES = 20  # an ambiguous prefix lists this many of its jobs
# What a change leaves for the next page (session.set_flash): the server's words, with its count.
NOTICES = {
    "cancelled": "The job is cancelled.",
    "cancel-requested": "Cancel requested: the job ends cancelled when its worker sees it (within a heartbeat).",
    "replayed": "The job is queued again (attempts 0); the replay is recorded.",
    "not-replayed": "Nothing was replayed: only a failed or cancelled job can be.",
    "finished": "The job had already finished: nothing to cancel.",
    "group-replayed": "Replayed {count} job(s): queued again, attempts 0, recorded in job_replays.",
    "bulk-cancel": "Cancelled {count} job(s) (running ones end when their worker sees it).",
    "bulk-replay": "Replayed {count} job(s): queued again, attempts 0, recorded in job_replays.",
    "run-now": "The schedule's job is queued now.",
    "made-due": "The job is due now: the next free worker of its queue takes it.",
    "not-waiting": "Nothing to run now: the job is not waiting (it runs, has ended or is due already).",
    "items-replayed": "Queued again for its failed items only (the ok ones are kept and skipped).",
    "items-not-replayed": "Nothing was replayed: the job has no failed items, or it is not finished.",
    "schedule-pause": "The schedule is paused.",
    "schedule-resume": "The schedule runs again.",
    "scope-pause": "Paused: no new job of it starts (concurrency 0); running ones finish.",
    "scope-resume": "Resumed: its jobs start again.",
    "limit-set": "The limit is set: in force from the next claim.",
    "limit-deleted": "The limit is removed: its scope's jobs start without it from the next claim.",
}
BULK_LIMIT = 1_000  # jobs one bulk action touches at most (the dry run says when a filter matches more)
BULK_STATES = {"cancel": (JobState.QUEUED, JobState.RUNNING), "replay": (JobState.FAILED, JobState.CANCELLED)}
STATES = [s.value for s in JobState]

_env = Environment(loader=PackageLoader("service.console", "templates"), autoescape=select_autoescape())
_env.globals.update(duration=duration, percent=percent, states=STATES, error_block=error_block, id_text=id_text)
templates = Jinja2Templates(env=_env)


async def operator(request: Request, settings: SettingsDep, store: StoreDep) -> Operator:
    return await session.current_operator(request, settings, store)


OperatorDep = Annotated[Operator, Depends(operator)]


def render(request: Request, name: str, operator: Operator | None, status_code: int = 200, **context: Any) -> Response:
    now: datetime = request.app.state.clock()
    flashed = session.take_flash(request)
    notice = NOTICES[flashed[0]].format(count=flashed[1]) if flashed and flashed[0] in NOTICES else None
    if flashed and flashed[0] == "cancel-requested" and context.get("terminal"):
        notice = None  # the page reloaded because the job ended: the request is history
    response = templates.TemplateResponse(
        request,
        name,
        {
            "operator": operator,
            "csrf": session.csrf_token(request),
            "path": request.url.path,
            "now": now,
            "notice": notice,
            "at": functools.partial(time_tag, now=now),
            "ago": functools.partial(time_tag, now=now, show="ago"),
            "live_seconds": LIVE_SECONDS,
            **context,
        },
        status_code=status_code,
    )
    session.set_cookies(request, response)
    session.clear_flash(request, response)
    return response


def problem_page(
    request: Request, operator: Operator | None, status_code: int, title: str, detail: str, **context: Any
) -> Response:
    """Every console error is a console page: what went wrong, in words, and where to go."""
    return render(request, "problem.html", operator, status_code=status_code, title=title, detail=detail, **context)


def flash_redirect(request: Request, url: str, notice: str, count: int = 0) -> Response:
    response = redirect(url)
    session.set_flash(request, response, notice, count)
    return response


async def act(store: StoreDep, who: Operator, action: str, target: str, jobs: int, **detail: Any) -> None:
    """The audit trail: a change made from the console, recorded after it was made."""
    await blocking(store.record_action, who.name, action, target, json.dumps(detail, sort_keys=True), jobs)


async def form_of(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (one value each), with its CSRF token checked first."""
    body = (await request.body()).decode("utf-8", errors="replace")
    fields = {name: values[0] for name, values in parse_qs(body, keep_blank_values=True).items()}
    session.require_csrf(request, fields.get(session.CSRF_FIELD))
    return fields


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


# -- login --------------------------------------------------------------------------------


@console.get("/login")
async def login_page(request: Request, settings: SettingsDep, next: str = "/ui") -> Response:
    if not settings.auth:
        return redirect("/ui")
    return render(request, "login.html", None, next=_local(next))


@console.post("/login")
async def login(request: Request, store: StoreDep, settings: SettingsDep) -> Response:
    fields = await form_of(request)
    target = _local(fields.get("next", "/ui"))
    if not settings.auth:
        return redirect(target)
    limiter: session.LoginLimiter = request.app.state.login_limiter
    client = session.client_of(request)
    wait = limiter.wait_seconds(client)
    if wait > 0:
        response = problem_page(
            request,
            None,
            429,
            "Too many login attempts",
            f"This client was refused {limiter.attempts} times within {limiter.window:.0f} s: "
            f"try again in {wait:.0f} s.",
        )
        response.headers["Retry-After"] = str(max(1, round(wait)))
        return response
    token = await session.admin_token_of(store, fields.get("token", ""))
    if token is None:
        limiter.refused(client)
        return render(request, "login.html", None, status_code=401, next=target, refused=True)
    response = redirect(target)
    await session.start_session(request, response, store, token)
    return response


@console.post("/logout")
async def logout(request: Request, store: StoreDep) -> Response:
    await form_of(request)
    response = redirect("/ui/login")
    await session.end_session(request, response, store)
    return response


def _local(target: str) -> str:
    """Only a console path may follow a login: never another site (an open redirect)."""
    return target if target.startswith("/ui") and not target.startswith("//") else "/ui"


# -- overview -----------------------------------------------------------------------------


@console.get("")
async def overview(request: Request, who: OperatorDep, store: StoreDep) -> Response:
    stats = await blocking(store.queue_stats)
    throughput = await blocking(store.throughput, WINDOW_SECONDS, BUCKETS)
    workers = await blocking(store.list_workers, WORKER_ALIVE_SECONDS)
    limits = await blocking(store.list_limits)
    usage = {u.scope: u for u in await blocking(store.scope_usage)}
    rows = queue_rows(stats, throughput, workers)
    totals = {
        name: sum(getattr(row, name) for row in rows)
        for name in ("queued", "due", "waiting", "running", "succeeded", "failed")
    }
    return render(
        request,
        "overview.html",
        who,
        rows=rows,
        totals=totals,
        workers_alive=len(workers),
        limits=limits,
        paused_scopes={limit.scope: True for limit in limits if limit.concurrency == 0},
        usage=usage,
        unserved=unserved(rows),
        database=await blocking(store.health_stats),
    )


# -- jobs -----------------------------------------------------------------------------------


JOB_SEARCH_CAP = 10_000  # jobs a search's count reads at most (count_text says why)
# The search's fields as the jobs list's URL (and a bulk action's form) carries them.
SEARCH_FIELDS = (
    "state",
    "kind",
    "queue",
    "tenant",
    "created_after",
    "created_before",
    "idempotency_key",
    "concurrency_key",
    "error",
    "workflow",
)


def _search(fields: Mapping[str, str]) -> tuple[JobQuery, dict[str, str]]:
    """The jobs list's filters (and a bulk action's, the same words): the query and the
    filters as given (an empty one is off), to keep in every link of the page."""
    given = {name: fields.get(name, "").strip() for name in SEARCH_FIELDS}
    state = given["state"]
    if state and state not in STATES:
        raise InvalidInput(f"no state {state!r}: one of {', '.join(STATES)}")
    for name in ("kind", "queue", "tenant"):
        if len(given[name]) > MAX_NAME_LENGTH:
            raise InvalidInput(f"{name}: at most {MAX_NAME_LENGTH} characters")
    for name in ("idempotency_key", "concurrency_key", "error"):
        if len(given[name]) > MAX_KEY_LENGTH:
            raise InvalidInput(f"{name.replace('_', ' ')}: at most {MAX_KEY_LENGTH} characters")
    after, before = (
        _instant(given["created_after"], "created after"),
        _instant(given["created_before"], "created before"),
    )
    if after and before and after >= before:
        raise InvalidInput("created after must be earlier than created before: no job is in that range")
    try:
        workflow = uuid.UUID(given["workflow"]) if given["workflow"] else None
    except ValueError:
        raise InvalidInput(
            f"workflow: not a workflow id (a job id, as a job's page links it): {given['workflow'][:40]!r}"
        ) from None
    query = JobQuery(
        tenant=given["tenant"] or None,
        state=JobState(state) if state else None,
        kind=given["kind"] or None,
        queue=given["queue"] or None,
        created_after=after,
        created_before=before,
        idempotency_key=given["idempotency_key"] or None,
        concurrency_key=given["concurrency_key"] or None,
        error_text=given["error"] or None,
        workflow_id=workflow,
        limit=PAGE_SIZE,
    )
    return query, {name: value for name, value in given.items() if value}


def count_text(count: JobCount) -> str:
    """ "1,234" when the count is exact, "1,234+" when it stopped at JOB_SEARCH_CAP jobs read
    (newest first, the way the pages walk): an exact count of a filter that no index serves
    (a kind, a time range) reads every job of the history, a million rows, on every refresh;
    this one reads what 200 pages would, and an operator's decision is the same past it."""
    return f"{count.matched:,}" if count.exact else f"{count.matched:,}+"


@console.get("/jobs")
async def jobs(
    request: Request,
    who: OperatorDep,
    store: StoreDep,
    job_id: Annotated[str, Query(alias="id")] = "",
    after: str = "",
    before: str = "",
) -> Response:
    if job_id.strip():  # the header's search box: open the job, by its id or the start of it
        return await _open_by_prefix(request, who, store, job_id)
    filters = {name: request.query_params.get(name, "") for name in SEARCH_FIELDS}
    try:
        query, kept = _search(request.query_params)
        query = dataclasses.replace(query, after_id=_page_id(after), before_id=_page_id(before))
    except ValueError as exc:
        return render(request, "jobs.html", who, status_code=422, error=str(exc), filters=filters, page=None)
    page = await blocking(store.list_jobs, query)
    count = await blocking(store.count_jobs, query, JOB_SEARCH_CAP)

    def here(**cursor: uuid.UUID) -> str:  # this search's URL, at a page
        return "/ui/jobs" + (f"?{urlencode({**kept, **cursor})}" if kept or cursor else "")

    next_url = here(after=page.next_after_id) if page.next_after_id else None
    # A page reached by "next" has newer jobs before it (the cursor's own job at least); one reached
    # by "previous" knows from its read whether more newer ones match.
    newer = page.newer_before_id if before else (page.items[0].id if after and page.items else None)
    prev_url = here(before=newer) if newer else None
    return render(
        request,
        "jobs.html",
        who,
        filters=filters,
        kept=kept,
        page=page,
        count=count_text(count),
        count_budget=JOB_SEARCH_CAP,
        next_url=next_url,
        prev_url=prev_url,
        first_url=here() if (after or before) else None,
        error=None,
    )


def _instant(text: str, name: str = "created after") -> datetime | None:
    if not text.strip():
        return None
    try:
        moment: datetime = iso_datetime(text)
    except ValueError as exc:
        raise InvalidInput(f"{name}: {exc}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _page_id(after: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(after) if after else None
    except ValueError:
        raise InvalidInput(f"not a page of this list ({after[:40]!r}): start from the first page") from None


async def _open_by_prefix(request: Request, who: Operator, store: StoreDep, text: str) -> Response:
    """A job by its id or any unique start of it; an ambiguous start lists what it matches."""
    text = text.strip()
    try:
        low, high = id_prefix_range(text)
    except InvalidInput as exc:
        return problem_page(request, who, 422, "Not a job id", str(exc))
    found = await blocking(store.job_ids_in_range, low, high, PREFIX_MATCHES + 1)
    if len(found) == 1:
        return redirect(f"/ui/jobs/{found[0]}")
    if not found:
        return render(request, "missing.html", who, status_code=404, job_id=text)
    return render(
        request,
        "ambiguous.html",
        who,
        status_code=300,  # Multiple Choices: the page lists them
        prefix=text,
        job_ids=found[:PREFIX_MATCHES],
        more=len(found) > PREFIX_MATCHES,
    )


DEPENDENCIES_SHOWN = 100
"""Parents (and children) the job page lists; GET /v1/jobs/{id}/dependencies pages through all."""


@console.get("/jobs/{job_id}")
async def job(
    request: Request,
    job_id: str,
    who: OperatorDep,
    store: StoreDep,
    items: str = "",
    items_after: str = "",
) -> Response:
    try:
        wanted = uuid.UUID(job_id)
    except ValueError:
        return await _open_by_prefix(request, who, store, job_id)
    status = await _find(store, wanted)
    if status is None:
        return render(request, "missing.html", who, status_code=404, job_id=job_id)
    if items not in ("", "failed") or (items_after and not (items_after.isascii() and items_after.isdigit())):
        return problem_page(
            request, who, 422, "Not a page of items", "items is '' or 'failed', items_after an item's index"
        )
    attempts = await blocking(store.job_attempts, status.id)
    replays = await blocking(store.job_replays, status.id)
    audit = await blocking(store.list_actions, 20, None, str(status.id))
    payload = await blocking(store.get_payload, status.id)
    facts = await blocking(functools.partial(store.explain_facts, status.id, workers_seen_within=WORKER_ALIVE_SECONDS))
    reasons = [plain_times(reason.message) for reason in explain(facts).reasons]  # the words of `jobq explain`
    item_page = None
    if status.items_ok or status.items_failed:
        item_page = await blocking(
            store.list_items,
            ItemQuery(
                job_id=status.id,
                state=ItemState.FAILED if items == "failed" else None,
                after_index=int(items_after) if items_after else None,
                limit=ITEMS_PAGE_SIZE,
            ),
        )
    next_items = None
    if item_page is not None and item_page.next_after_index is not None:
        next_items = f"/ui/jobs/{status.id}?" + urlencode(
            {**({"items": items} if items else {}), "items_after": item_page.next_after_index}
        )
    # Workflows: its parents and children with their states, both ways linked (a first page each),
    # and the progress of its whole workflow (one count through its index).
    dependencies = await blocking(functools.partial(store.dependencies, status.id, limit=DEPENDENCIES_SHOWN))
    workflow = None
    if status.workflow_id is not None:
        workflow = await blocking(store.workflow_progress, status.workflow_id)
    return render(
        request,
        "job.html",
        who,
        job=status,
        terminal=status.state.terminal,
        history=history(attempts, replays),
        audit=audit,
        payload=payload,
        reasons=reasons,
        dependencies=dependencies,
        workflow=workflow,
        tag=change_tag(status),
        max_wait=MAX_WAIT_SECONDS,
        item_page=item_page,
        items_filter=items,
        items_after=items_after,
        next_items=next_items,
    )


async def _find(store: StoreDep, job_id: uuid.UUID) -> JobStatus | None:
    try:
        return await blocking(store.get, job_id)
    except JobNotFound:
        return None


@console.get("/jobs/{job_id}/status")
async def job_status(
    job_id: uuid.UUID,
    who: OperatorDep,
    store: StoreDep,
    watcher: WatcherDep,
    stopping: StoppingDep,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0,
    tag: Annotated[str | None, Query(max_length=MAX_TAG_LENGTH)] = None,
) -> JSONResponse:
    """The job page's live part: answers when the state or progress changes (the API's long poll)."""
    status = await wait_for_change(job_id, None, store, watcher, wait, tag, stopping)
    return JSONResponse(
        {
            "state": status.state.value,
            "done": status.done,
            "total": status.total,
            "percent": percent(status),
            "stale": status.stale,
            "cancel_requested": status.cancel_requested,
            "tag": change_tag(status),
        }
    )


@console.get("/jobs/{job_id}/result")
async def job_result(job_id: uuid.UUID, who: OperatorDep, store: StoreDep) -> StreamingResponse:
    return await streamed_result(store, job_id, None)


@console.post("/jobs/{job_id}/cancel")
async def cancel(request: Request, job_id: uuid.UUID, who: OperatorDep, store: StoreDep) -> Response:
    await form_of(request)
    who.require_act()
    try:
        status = await blocking(store.cancel, job_id)
    except InvalidTransition:
        return flash_redirect(request, f"/ui/jobs/{job_id}", "finished")
    notice = "cancelled" if status.state is JobState.CANCELLED else "cancel-requested"
    await act(store, who, "cancel", str(job_id), 1, state=status.state.value)
    return flash_redirect(request, f"/ui/jobs/{job_id}", notice)


@console.post("/jobs/{job_id}/replay")
async def replay_job(request: Request, job_id: uuid.UUID, who: OperatorDep, store: StoreDep) -> Response:
    await form_of(request)
    who.require_act()
    replayed = await blocking(store.replay, ReplayFilter(ids=(job_id,)), who.replayed_by)
    if replayed:
        await act(store, who, "replay", str(job_id), 1)
    return flash_redirect(request, f"/ui/jobs/{job_id}", "replayed" if replayed else "not-replayed")


@console.post("/jobs/{job_id}/run-now")
async def run_now(request: Request, job_id: uuid.UUID, who: OperatorDep, store: StoreDep) -> Response:
    """A delayed job (or one waiting for its retry) due at once."""
    await form_of(request)
    who.require_act()
    try:
        await blocking(store.make_due, job_id)
    except InvalidTransition:
        return flash_redirect(request, f"/ui/jobs/{job_id}", "not-waiting")
    await act(store, who, "run-now", str(job_id), 1)
    return flash_redirect(request, f"/ui/jobs/{job_id}", "made-due")


@console.post("/jobs/{job_id}/replay-items")
async def replay_failed_items(request: Request, job_id: uuid.UUID, who: OperatorDep, store: StoreDep) -> Response:
    """`jobq replay --failed-items` for one job: only its failed items run again."""
    await form_of(request)
    who.require_act()
    replayed = await blocking(store.replay, ReplayFilter(ids=(job_id,), failed_items=True), who.replayed_by)
    if replayed:
        await act(store, who, "replay-failed-items", str(job_id), 1)
    return flash_redirect(request, f"/ui/jobs/{job_id}", "items-replayed" if replayed else "items-not-replayed")


# -- failures -------------------------------------------------------------------------------


@console.get("/failures")
async def failures(
    request: Request,
    who: OperatorDep,
    store: StoreDep,
    now: NowDep,
    since: str = "24h",
    kind: str = "",
) -> Response:
    try:
        start = now - timedelta(seconds=parse_duration(since, name="since"))
    except InvalidInput as exc:
        return render(request, "failures.html", who, status_code=422, error=str(exc), groups=[], since=since, kind=kind)
    groups = await blocking(store.failure_groups, start, kind.strip() or None)
    return render(request, "failures.html", who, groups=groups, since=since, kind=kind, error=None)


def _group_filter(now: datetime, kind: str, group: str, since: str) -> ReplayFilter:
    return ReplayFilter(
        kind=kind,
        error_group=group,
        since=now - timedelta(seconds=parse_duration(since, name="since")),
    )


@console.get("/failures/replay")
async def replay_group_dry_run(
    request: Request, who: OperatorDep, store: StoreDep, now: NowDep, kind: str, group: str, since: str = "24h"
) -> Response:
    """The dry run: how many jobs "replay this group" will queue again, before it does."""
    try:
        _group_filter(now, kind, group, since)
    except InvalidInput as exc:
        return problem_page(request, who, 422, "Not a failure group", str(exc))
    job_ids = await blocking(store.replay, _group_filter(now, kind, group, since), who.replayed_by, True)
    return render(request, "replay.html", who, kind=kind, group=group, since=since, job_ids=job_ids)


@console.post("/failures/replay")
async def replay_group(request: Request, who: OperatorDep, store: StoreDep, now: NowDep) -> Response:
    fields = await form_of(request)
    who.require_act()
    which = _group_filter(now, fields.get("kind", ""), fields.get("group", ""), fields.get("since", "24h"))
    replayed = await blocking(store.replay, which, who.replayed_by)
    await act(
        store,
        who,
        "replay-group",
        f"kind:{which.kind}",
        len(replayed),
        group=which.error_group,
        since=fields.get("since"),
    )
    url = "/ui/failures?" + urlencode({"since": fields.get("since", "24h")})
    return flash_redirect(request, url, "group-replayed", len(replayed))


# -- workers --------------------------------------------------------------------------------


@console.get("/workers")
async def workers(request: Request, who: OperatorDep, store: StoreDep, now: NowDep) -> Response:
    listed = await blocking(store.list_workers)
    running = await blocking(store.running_jobs)
    leader = await blocking(store.current_leader)  # the worker that runs the fleet's maintenance now
    by_worker: dict[str, list[JobStatus]] = {}
    for status in running:
        by_worker.setdefault(status.lease_owner or "", []).append(status)
    alive_after = now - timedelta(seconds=WORKER_ALIVE_SECONDS)
    return render(
        request,
        "workers.html",
        who,
        workers=listed,
        by_worker=by_worker,
        alive_after=alive_after,
        now=now,
        orphans=[s for s in running if s.lease_owner not in {w.id for w in listed}],
        leader=leader,
    )


# -- schedules -------------------------------------------------------------------------------


@console.get("/schedules")
async def schedules(request: Request, who: OperatorDep, store: StoreDep, now: NowDep) -> Response:
    listed = await blocking(store.list_schedules)
    return render(request, "schedules.html", who, schedules=listed, now=now)


# -- errors of the console's own: a login page, a 403 page ---------------------------------


async def login_required(request: Request, exc: Exception) -> Response:
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    login_url = "/ui/login?" + urlencode({"next": here})
    if "x-jobq-page" in request.headers:
        # A page's script (live refresh, a job's long poll): it says on the page that the
        # session ended and offers the login, instead of polling on silently.
        referer = request.headers.get("x-jobq-page", "")
        return JSONResponse({"login": "/ui/login?" + urlencode({"next": _local(referer)})}, status_code=401)
    if request.method == "GET":
        return redirect(login_url)
    return problem_page(
        request, None, 401, "Your session has ended", "Log in again, then repeat what you were doing.", login=True
    )


async def csrf_refused(request: Request, exc: Exception) -> Response:
    return render(request, "refused.html", None, status_code=403)


async def read_only_refused(request: Request, exc: Exception) -> Response:
    return problem_page(
        request,
        None,
        403,
        "Read-only",
        "Your token may look at the console but not change anything: nothing was changed.",
    )


# Why a console URL failed, in words, for the errors FastAPI and the store raise (the API
# answers the same errors as application/problem+json: see console_errors in __init__.py).
_TITLES = {
    400: "Bad request",
    404: "Not found",
    405: "Not allowed",
    409: "Conflict",
    422: "Not a valid request",
    429: "Too many requests",
    503: "The database is unavailable",
}


def error_page(request: Request, exc: Exception) -> Response:
    """The console's page for an error of the framework, the store or the console itself."""
    if isinstance(exc, RequestValidationError):
        detail = "; ".join(_validation_text(error) for error in exc.errors())
        return problem_page(request, None, 422, _TITLES[422], detail)
    if isinstance(exc, StarletteHTTPException):
        code = exc.status_code
        detail = "There is no such page in the console." if code == 404 else str(exc.detail)
        return problem_page(request, None, code, _TITLES.get(code, f"Error {code}"), detail)
    if isinstance(exc, InvalidInput):
        return problem_page(request, None, 422, _TITLES[422], str(exc))
    if isinstance(exc, JobNotFound):
        return problem_page(request, None, 404, "No such job", str(exc))
    if isinstance(exc, InvalidTransition):  # e.g. the result of a job that has not succeeded
        return problem_page(request, None, 409, _TITLES[409], str(exc))
    if isinstance(exc, StoreUnavailable):
        detail = "The console cannot reach its database right now; reload in a few seconds."
        response = problem_page(request, None, 503, _TITLES[503], detail)
        response.headers["Retry-After"] = "5"
        return response
    log.error("console error on %s", request.url.path, exc_info=exc)
    return problem_page(
        request, None, 500, "Something went wrong", "The console could not show this page; its log says why."
    )


def _validation_text(error: Any) -> str:
    where = ".".join(str(part) for part in error.get("loc", ())[1:]) or "the request"
    return f"{where}: {error.get('msg', 'not valid')}"


# -- bulk actions: every job matching a filter ---------------------------------------------------


def _bulk_query(fields: Mapping[str, str]) -> tuple[str, JobQuery, dict[str, str]]:
    """The action and the jobs list's filter of a bulk request (the dry run's URL, the form):
    the list's own search (_search), so a bulk action touches exactly what the list showed."""
    action = fields.get("action", "")
    if action not in BULK_STATES:
        raise InvalidInput("action is cancel or replay")
    query, kept = _search(fields)
    return action, query, kept


async def _matching(store: StoreDep, action: str, query: JobQuery) -> tuple[list[uuid.UUID], bool]:
    """The ids of the jobs an action would touch (the filter's, in the states it applies to),
    newest first, at most BULK_LIMIT; and whether the filter matches more."""
    found: list[uuid.UUID] = []
    for state in BULK_STATES[action]:
        if query.state is not None and query.state is not state:
            continue
        after: uuid.UUID | None = None
        while len(found) <= BULK_LIMIT:
            page = await blocking(store.list_jobs, dataclasses.replace(query, state=state, after_id=after))
            found += [job.id for job in page.items]
            if page.next_after_id is None:
                break
            after = page.next_after_id
    return found[:BULK_LIMIT], len(found) > BULK_LIMIT


@console.get("/bulk")
async def bulk_dry_run(request: Request, who: OperatorDep, store: StoreDep) -> Response:
    """The dry run of a bulk action: how many jobs it touches, which, before anything changes."""
    action, query, kept = _bulk_query(request.query_params)
    job_ids, more = await _matching(store, action, query)
    return render(
        request,
        "bulk.html",
        who,
        action=action,
        kept=kept,
        job_ids=job_ids,
        more=more,
        limit=BULK_LIMIT,
        states=[s.value for s in BULK_STATES[action]],
    )


@console.post("/bulk")
async def bulk(request: Request, who: OperatorDep, store: StoreDep) -> Response:
    fields = await form_of(request)
    who.require_act()
    action, query, kept = _bulk_query(fields)
    job_ids, _more = await _matching(store, action, query)
    if action == "replay":
        touched = len(await blocking(store.replay, ReplayFilter(ids=tuple(job_ids)), who.replayed_by)) if job_ids else 0
    else:
        touched = 0
        for job_id in job_ids:
            try:
                await blocking(store.cancel, job_id)
                touched += 1
            except InvalidTransition:
                pass  # it finished between the dry run and now
    await act(store, who, f"bulk-{action}", "jobs?" + urlencode(kept), touched, filter=kept)
    return flash_redirect(request, "/ui/jobs?" + urlencode(kept), f"bulk-{action}", touched)


# -- schedules: run now, pause, resume ----------------------------------------------------------


@console.post("/schedules/{name}/{what}")
async def schedule_action(request: Request, name: str, what: str, who: OperatorDep, store: StoreDep) -> Response:
    await form_of(request)
    who.require_act()
    schedule = next((s for s in await blocking(store.list_schedules) if s.name == name), None)
    if schedule is None:
        return problem_page(request, who, 404, "No such schedule", f"There is no schedule {name!r}.")
    if what == "run-now":
        now: datetime = request.app.state.clock()
        job = await blocking(store.enqueue, job_for(schedule.spec, now))
        await act(store, who, "schedule-run-now", f"schedule:{name}", 1, job_id=str(job.id))
        return flash_redirect(request, f"/ui/jobs/{job.id}", "run-now")
    if what not in ("pause", "resume"):
        return problem_page(request, who, 404, "Not found", "A schedule can be run now, paused or resumed.")
    await blocking(store.set_schedule_paused, name, what == "pause", None)
    await act(store, who, f"schedule-{what}", f"schedule:{name}", 0)
    return flash_redirect(request, "/ui/schedules", f"schedule-{what}")


# -- a queue's or a kind's pause: a concurrency of 0 on its scope ---------------------------------


@console.post("/scopes/{what}")
async def scope_action(request: Request, what: str, who: OperatorDep, store: StoreDep) -> Response:
    """Pause: the scope's concurrency becomes 0 (its rate and weight kept), so no new job of it
    is claimed; the concurrency it had is kept in the audit record. Resume: that concurrency
    comes back (or none, the limit removed when nothing else is set)."""
    fields = await form_of(request)
    who.require_act()
    scope = check_scope(fields.get("scope", ""))
    if not scope.startswith(("queue:", "kind:")) or what not in ("pause", "resume"):
        raise InvalidInput("pause or resume a queue:NAME or a kind:NAME")
    current = next((limit for limit in await blocking(store.list_limits) if limit.scope == scope), None)
    if what == "pause":
        previous = current.concurrency if current else None
        kept = dataclasses.replace(current, concurrency=0) if current else Limit(scope, concurrency=0)
        await blocking(store.set_limit, kept)
        await act(store, who, "scope-pause", scope, 0, previous_concurrency=previous)
    else:
        pauses = [a for a in await blocking(store.list_actions, 50, None, scope) if a.action == "scope-pause"]
        previous = json.loads(pauses[0].detail).get("previous_concurrency") if pauses else None
        if current is not None:
            if previous is None and current.rate is None and current.weight is None:
                await blocking(store.delete_limit, scope)  # nothing was set before the pause
            else:
                await blocking(store.set_limit, dataclasses.replace(current, concurrency=previous))
        await act(store, who, "scope-resume", scope, 0, concurrency=previous)
    return flash_redirect(request, "/ui", f"scope-{what}")


# -- the audit trail ----------------------------------------------------------------------------

AUDIT_PAGE = 50


@console.get("/audit")
async def audit(request: Request, who: OperatorDep, store: StoreDep, before: str = "", target: str = "") -> Response:
    if before and not (before.isascii() and before.isdigit()):  # "²" is a digit to isdigit, not to int
        raise InvalidInput("before is an entry's number")
    entries = await blocking(store.list_actions, AUDIT_PAGE + 1, int(before) if before else None, target or None)
    next_url = None
    if len(entries) > AUDIT_PAGE:
        entries = entries[:AUDIT_PAGE]
        next_url = "/ui/audit?" + urlencode({**({"target": target} if target else {}), "before": entries[-1].id})
    return render(request, "audit.html", who, entries=entries, next_url=next_url, target=target)


# -- limits and weights: what `jobq limits set/delete/list` does ----------------------------------


@console.get("/limits")
async def limits_page(request: Request, who: OperatorDep, store: StoreDep, scope: str = "") -> Response:
    """Every limit with the jobs running in its scope; the form sets one (pre-filled to edit ``scope``)."""
    listed = await blocking(store.list_limits)
    usage = {u.scope: u for u in await blocking(store.scope_usage)}
    editing = next((limit for limit in listed if limit.scope == scope), None)
    return render(request, "limits.html", who, limits=listed, usage=usage, editing=editing, scope=scope)


def _limit_of(fields: Mapping[str, str]) -> Limit:
    """The limit a form asks for, checked by the domain's rules (service.limits.Limit): a bad
    value is an InvalidInput that names it, raised before anything is written."""
    scope = check_scope(fields.get("scope", "").strip())
    concurrency, rate, weight = (fields.get(name, "").strip() for name in ("concurrency", "rate", "weight"))
    if concurrency and not concurrency.isdigit():
        raise InvalidInput(f"concurrency must be a whole number from 0 to {MAX_CONCURRENCY}, not {concurrency[:40]!r}")
    starts, per_seconds = parse_rate(rate) if rate else (None, None)
    try:
        share = float(weight) if weight else None
    except ValueError:
        raise InvalidInput(f"weight must be a number above 0 and at most {MAX_WEIGHT:g}, not {weight[:40]!r}") from None
    return Limit(
        scope,
        concurrency=int(concurrency) if concurrency else None,
        rate=starts,
        per_seconds=per_seconds,
        weight=share,
    )


@console.post("/limits")
async def set_limit(request: Request, who: OperatorDep, store: StoreDep) -> Response:
    fields = await form_of(request)
    who.require_act()
    try:
        limit = _limit_of(fields)
    except InvalidInput as exc:
        return problem_page(request, who, 422, "Not a valid limit", f"{exc}. Nothing was changed.", back="/ui/limits")
    before = next((item for item in await blocking(store.list_limits) if item.scope == limit.scope), None)
    await blocking(store.set_limit, limit)
    await act(
        store,
        who,
        "limit-set",
        limit.scope,
        0,
        concurrency=limit.concurrency,
        rate=limit.rate_text,
        weight=limit.weight,
        previous=None if before is None else _limit_words(before),
    )
    return flash_redirect(request, "/ui/limits", "limit-set")


@console.post("/limits/delete")
async def delete_limit(request: Request, who: OperatorDep, store: StoreDep) -> Response:
    fields = await form_of(request)
    who.require_act()
    scope = fields.get("scope", "").strip()
    before = next((item for item in await blocking(store.list_limits) if item.scope == scope), None)
    try:
        await blocking(store.delete_limit, check_scope(scope))
    except (InvalidInput, LimitNotFound) as exc:
        code = 404 if isinstance(exc, LimitNotFound) else 422
        return problem_page(request, who, code, "No such limit", f"{exc}. Nothing was changed.", back="/ui/limits")
    await act(store, who, "limit-delete", scope, 0, previous=None if before is None else _limit_words(before))
    return flash_redirect(request, "/ui/limits", "limit-deleted")


def _limit_words(limit: Limit) -> dict[str, Any]:
    """What a limit was, for the audit record of its change."""
    return {"concurrency": limit.concurrency, "rate": limit.rate_text, "weight": limit.weight}


# -- stats: throughput, failure ratio, queue wait and run time per queue or kind ------------------


@console.get("/stats")
async def stats(
    request: Request,
    who: OperatorDep,
    store: StoreDep,
    now: NowDep,
    window: Annotated[str, Query(alias="range")] = "1h",
    by: str = "queue",
) -> Response:
    """Small inline SVG charts per queue or kind. 1 h and 24 h read the window of finished jobs
    (ix_jobs_finished_at: their cost follows the jobs finished in it); 7 d reads the daily rollup
    (a few rows per day, whatever the history), which is also why 7 d has daily bars: the
    rollup keeps days, nothing finer."""
    span = STATS_RANGES.get(window)
    if span is None or by not in ("queue", "kind"):
        detail = f"range is one of {', '.join(STATS_RANGES)}; by is queue or kind"
        return problem_page(request, who, 422, "Not a range of the stats", detail)
    if span.daily:
        first_day = (now.astimezone(UTC) - timedelta(days=span.buckets - 1)).date()
        buckets = await blocking(store.daily_outcomes, by, first_day)
    else:
        buckets = await blocking(store.recent_outcomes, by, span.seconds, span.buckets)
    return render(
        request,
        "stats.html",
        who,
        span=span,
        ranges=STATS_RANGES,
        by=by,
        rows=stats_rows(buckets, span, bucket_labels(span, now)),
        charts=STATS_CHARTS,
    )
