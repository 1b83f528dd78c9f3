"""The console's pages under ``/ui``: overview, jobs, a job, failures, workers, schedules, login.

Each page is a plain GET whose URL holds everything it shows (filters, the page's
keyset cursor), so it can be bookmarked and shared. Every change (cancel, replay,
login, logout) is a POST that carries the CSRF token (session.py) and answers with
a redirect to a page (POST/redirect/GET), so a reload never repeats it. Every read
and write is a store call, the same ones ``jobq stats``, ``jobq failures`` and
``jobq replay`` make; the console writes no SQL.
"""

from __future__ import annotations

import functools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, PackageLoader, select_autoescape

from service.console import session
from service.console.session import Operator
from service.console.views import BUCKETS, WINDOW_SECONDS, duration, percent, queue_rows
from service.durations import parse_duration
from service.errors import InvalidInput, InvalidTransition, JobNotFound
from service.explain import explain
from service.jobs import WORKER_ALIVE_SECONDS, JobQuery, JobState, JobStatus, ReplayFilter
from service.web import (
    MAX_TAG_LENGTH,
    MAX_WAIT_SECONDS,
    NowDep,
    SettingsDep,
    StoreDep,
    WatcherDep,
    blocking,
    change_tag,
    iso_datetime,
    wait_for_change,
)

console = APIRouter(prefix="/ui", include_in_schema=False)

PAGE_SIZE = 50
NOTICES = {
    "cancelled": "The job is cancelled.",
    "cancel-requested": "Cancel requested: the job ends cancelled when its worker sees it (within a heartbeat).",
    "replayed": "The job is queued again (attempts 0); the replay is recorded.",
    "not-replayed": "Nothing was replayed: only a failed or cancelled job can be.",
    "finished": "The job had already finished: nothing to cancel.",
}

_env = Environment(loader=PackageLoader("service.console", "templates"), autoescape=select_autoescape())
_env.globals.update(duration=duration, percent=percent, states=[s.value for s in JobState])
templates = Jinja2Templates(env=_env)


async def operator(request: Request, settings: SettingsDep, store: StoreDep) -> Operator:
    return await session.current_operator(request, settings, store)


OperatorDep = Annotated[Operator, Depends(operator)]


def render(request: Request, name: str, operator: Operator | None, status_code: int = 200, **context: Any) -> Response:
    response = templates.TemplateResponse(
        request,
        name,
        {"operator": operator, "csrf": session.csrf_token(request), "path": request.url.path, **context},
        status_code=status_code,
    )
    session.set_cookies(request, response)
    return response


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
    token = fields.get("token", "")
    if not await session.check_admin_token(store, token):
        return render(request, "login.html", None, status_code=401, next=target, refused=True)
    response = redirect(target)
    session.start_session(request, response, token)
    return response


@console.post("/logout")
async def logout(request: Request) -> Response:
    await form_of(request)
    response = redirect("/ui/login")
    session.end_session(request, response)
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
        request, "overview.html", who, rows=rows, totals=totals, workers_alive=len(workers), limits=limits, usage=usage
    )


# -- jobs -----------------------------------------------------------------------------------


@console.get("/jobs")
async def jobs(
    request: Request,
    who: OperatorDep,
    store: StoreDep,
    job_id: Annotated[str, Query(alias="id")] = "",
    state: str = "",
    kind: str = "",
    queue: str = "",
    tenant: str = "",
    created_after: str = "",
    after: str = "",
) -> Response:
    if job_id.strip():  # the header's search box: open the job
        try:
            return redirect(f"/ui/jobs/{uuid.UUID(job_id.strip())}")
        except ValueError:
            return render(
                request,
                "jobs.html",
                who,
                status_code=422,
                error=f"not a job id: {job_id.strip()!r}",
                filters={},
                page=None,
                next_url=None,
            )
    filters = {"state": state, "kind": kind, "queue": queue, "tenant": tenant, "created_after": created_after}
    try:
        query = JobQuery(
            tenant=tenant.strip() or None,
            state=JobState(state) if state else None,
            kind=kind.strip() or None,
            queue=queue.strip() or None,
            created_after=_instant(created_after),
            limit=PAGE_SIZE,
            after_id=uuid.UUID(after) if after else None,
        )
    except ValueError as exc:
        return render(
            request, "jobs.html", who, status_code=422, error=str(exc), filters=filters, page=None, next_url=None
        )
    page = await blocking(store.list_jobs, query)
    kept = {name: value for name, value in filters.items() if value}
    next_url = None
    if page.next_after_id is not None:
        next_url = "/ui/jobs?" + urlencode({**kept, "after": str(page.next_after_id)})
    first_url = "/ui/jobs?" + urlencode(kept) if after else None
    return render(
        request, "jobs.html", who, filters=filters, page=page, next_url=next_url, error=None, first_url=first_url
    )


def _instant(text: str) -> datetime | None:
    if not text.strip():
        return None
    moment: datetime = iso_datetime(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


DEPENDENCIES_SHOWN = 100
"""Parents (and children) the job page lists; GET /v1/jobs/{id}/dependencies pages through all."""


@console.get("/jobs/{job_id}")
async def job(request: Request, job_id: str, who: OperatorDep, store: StoreDep, notice: str = "") -> Response:
    status = await _find(store, job_id)
    if status is None:
        return render(request, "missing.html", who, status_code=404, job_id=job_id)
    attempts = await blocking(store.job_attempts, status.id)
    payload = await blocking(store.get_payload, status.id)
    facts = await blocking(functools.partial(store.explain_facts, status.id, workers_seen_within=WORKER_ALIVE_SECONDS))
    reasons = [reason.message for reason in explain(facts).reasons]  # the words of `jobq explain`
    # Workflows: its parents and children with their states, both ways linked (a first page each).
    dependencies = await blocking(functools.partial(store.dependencies, status.id, limit=DEPENDENCIES_SHOWN))
    if notice == "cancel-requested" and status.state.terminal:
        notice = ""  # the page reloaded because the job ended: the request is history
    return render(
        request,
        "job.html",
        who,
        job=status,
        attempts=attempts,
        payload=payload,
        reasons=reasons,
        dependencies=dependencies,
        tag=change_tag(status),
        notice=NOTICES.get(notice),
        max_wait=MAX_WAIT_SECONDS,
    )


async def _find(store: StoreDep, job_id: str) -> JobStatus | None:
    try:
        return await blocking(store.get, uuid.UUID(job_id))
    except (ValueError, JobNotFound):
        return None


@console.get("/jobs/{job_id}/status")
async def job_status(
    job_id: uuid.UUID,
    who: OperatorDep,
    store: StoreDep,
    watcher: WatcherDep,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0,
    tag: Annotated[str | None, Query(max_length=MAX_TAG_LENGTH)] = None,
) -> JSONResponse:
    """The job page's live part: answers when the state or progress changes (the API's long poll)."""
    status = await wait_for_change(job_id, None, store, watcher, wait, tag)
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
async def job_result(job_id: uuid.UUID, who: OperatorDep, store: StoreDep) -> JSONResponse:
    return JSONResponse({"job_id": str(job_id), "result": await blocking(store.get_result, job_id)})


@console.post("/jobs/{job_id}/cancel")
async def cancel(request: Request, job_id: uuid.UUID, who: OperatorDep, store: StoreDep) -> Response:
    await form_of(request)
    try:
        status = await blocking(store.cancel, job_id)
    except InvalidTransition:
        return redirect(f"/ui/jobs/{job_id}?notice=finished")
    notice = "cancelled" if status.state is JobState.CANCELLED else "cancel-requested"
    return redirect(f"/ui/jobs/{job_id}?notice={notice}")


@console.post("/jobs/{job_id}/replay")
async def replay_job(request: Request, job_id: uuid.UUID, who: OperatorDep, store: StoreDep) -> Response:
    await form_of(request)
    replayed = await blocking(store.replay, ReplayFilter(ids=(job_id,)), who.replayed_by)
    return redirect(f"/ui/jobs/{job_id}?notice={'replayed' if replayed else 'not-replayed'}")


# -- failures -------------------------------------------------------------------------------


@console.get("/failures")
async def failures(
    request: Request,
    who: OperatorDep,
    store: StoreDep,
    now: NowDep,
    since: str = "24h",
    kind: str = "",
    replayed: int | None = None,
) -> Response:
    try:
        start = now - timedelta(seconds=parse_duration(since, name="since"))
    except InvalidInput as exc:
        return render(
            request,
            "failures.html",
            who,
            status_code=422,
            error=str(exc),
            groups=[],
            since=since,
            kind=kind,
            replayed=None,
        )
    groups = await blocking(store.failure_groups, start, kind.strip() or None)
    return render(request, "failures.html", who, groups=groups, since=since, kind=kind, error=None, replayed=replayed)


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
    job_ids = await blocking(store.replay, _group_filter(now, kind, group, since), who.replayed_by, True)
    return render(request, "replay.html", who, kind=kind, group=group, since=since, job_ids=job_ids)


@console.post("/failures/replay")
async def replay_group(request: Request, who: OperatorDep, store: StoreDep, now: NowDep) -> Response:
    fields = await form_of(request)
    which = _group_filter(now, fields.get("kind", ""), fields.get("group", ""), fields.get("since", "24h"))
    replayed = await blocking(store.replay, which, who.replayed_by)
    return redirect("/ui/failures?" + urlencode({"since": fields.get("since", "24h"), "replayed": len(replayed)}))


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
    if request.method == "GET":
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return redirect("/ui/login?" + urlencode({"next": here}))
    return HTMLResponse("<h1>401</h1><p>Log in at <a href='/ui/login'>/ui/login</a> with an admin token.</p>", 401)


async def csrf_refused(request: Request, exc: Exception) -> Response:
    return render(request, "refused.html", None, status_code=403)
