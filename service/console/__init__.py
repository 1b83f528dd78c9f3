"""The operator console at ``/ui``: server-rendered pages (Jinja2) and a few lines of JavaScript.

Mounted beside the API by the app factory (:func:`service.app.create_app`), so ``jobq serve``
and ``jobq dev`` serve it from the same process; it shares :mod:`service.web` with the API
and imports nothing of it. Every asset (CSS, JS) is package data served at ``/ui/static``: the
console works without internet and needs no front-end build. Access: session.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.console.headers import ConsoleHeaders, is_console_path
from service.console.routes import console, csrf_refused, error_page, login_required, read_only_refused
from service.console.session import CsrfRefused, LoginLimiter, LoginRequired, ReadOnlyRefused
from service.errors import JobqError

Handler = Callable[[Request, Exception], Awaitable[Response] | Response]


def mount_console(app: FastAPI) -> None:
    app.include_router(console)
    app.mount("/ui/static", StaticFiles(packages=[("service.console", "static")]), name="console-static")
    app.state.login_limiter = LoginLimiter()
    app.add_middleware(ConsoleHeaders)
    app.add_exception_handler(LoginRequired, login_required)
    app.add_exception_handler(CsrfRefused, csrf_refused)
    app.add_exception_handler(ReadOnlyRefused, read_only_refused)
    for exception_class in (JobqError, RequestValidationError, StarletteHTTPException, Exception):
        app.add_exception_handler(exception_class, console_errors(app.exception_handlers.get(exception_class)))


def console_errors(elsewhere: Handler | None) -> Handler:
    """Errors under /ui are console pages; the rest go to the handler mounted before (the API's
    problem+json): one app, two audiences."""

    async def handle(request: Request, exc: Exception) -> Response:
        if is_console_path(request.url.path) or elsewhere is None:
            return error_page(request, exc)
        answer = elsewhere(request, exc)
        return await answer if not isinstance(answer, Response) else answer

    return handle
