"""The operator console at ``/ui``: server-rendered pages (Jinja2) and a few lines of JavaScript.

Mounted beside the API by the app factory (:func:`service.app.create_app`), so ``jobq serve``
and ``jobq dev`` serve it from the same process; it shares :mod:`service.web` with the API
and imports nothing of it. Every asset (CSS, JS) is package data served at ``/ui/static``: the
console works without internet and needs no front-end build. Access: session.py.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from service.console.routes import console, csrf_refused, login_required
from service.console.session import CsrfRefused, LoginRequired


def mount_console(app: FastAPI) -> None:
    app.include_router(console)
    app.mount("/ui/static", StaticFiles(packages=[("service.console", "static")]), name="console-static")
    app.add_exception_handler(LoginRequired, login_required)
    app.add_exception_handler(CsrfRefused, csrf_refused)
