"""The app, composed at one root: ``create_app(settings)`` mounts the REST API and the console.

    app = create_app(load_settings())      # what `jobq serve` runs under uvicorn

The API (:mod:`service.api`) and the console (:mod:`service.console`) never import
each other; both import :mod:`service.web`, whose dependencies read what this
module's lifespan puts on ``app.state``. The store is opened when the app starts
(with ``api_pool_size`` connections on PostgreSQL) and closed when it stops; so is
the one long-poll listener. Nothing happens at import time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from service.api.app import JobqApi, mount_api, new_api, start_api
from service.config import Settings, load_settings
from service.console import mount_console
from service.store import open_store
from service.store.base import Clock
from service.web import NotifyWatcher, PollingWatcher, Stopping, Watcher, uses_notifications


def _utc_now() -> datetime:
    return datetime.now(UTC)


def create_app(settings: Settings | None = None, *, clock: Clock | None = None) -> JobqApi:
    """The API and the console. ``clock`` (tests) pins "now" for the store and for the poll hints."""
    settings = settings or load_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store_settings = settings.model_copy(update={"pool_size": settings.api_pool_size})
        store = await run_in_threadpool(lambda: open_store(store_settings, clock=clock))
        watcher: Watcher = NotifyWatcher(store) if uses_notifications(settings) else PollingWatcher()
        try:
            watcher.start()
        except BaseException:
            store.close()
            raise
        app.state.store = store
        app.state.watcher = watcher
        app.state.stopping.loop = asyncio.get_running_loop()
        start_api(app.state, store, settings)
        try:
            yield
        finally:
            await run_in_threadpool(watcher.stop)
            await run_in_threadpool(store.close)

    app = new_api(lifespan)
    app.state.settings = settings
    now: Callable[[], datetime] = clock or _utc_now
    app.state.clock = now
    app.state.stopping = Stopping()  # set by the server's stop signal: long polls answer at once
    mount_api(app, settings)
    mount_console(app)
    return app
