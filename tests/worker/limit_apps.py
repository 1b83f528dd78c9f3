"""Handlers for the limits tests in real ``jobq worker`` processes (``--app tests.worker.limit_apps``).

Each records ``start|end job_id:attempt scope unix_time`` lines in the file its payload names
(O_APPEND: concurrent writers' short lines never interleave), so the test can
measure overlaps and start rates from the handlers' own view.
"""

from __future__ import annotations

import os
import time
from typing import Any

from service.worker import App, JobContext

app = App("limit-tests")


def _record(path: str, what: str, ctx: JobContext, scope: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{what} {ctx.job_id}:{ctx.attempt} {scope} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


@app.handler("span")
def span(ctx: JobContext) -> dict[str, Any]:
    """Runs ``seconds``, recording its start and end under the payload's ``scope``."""
    _record(ctx.payload["log"], "start", ctx, ctx.payload.get("scope", "-"))
    time.sleep(float(ctx.payload.get("seconds", 0.005)))
    _record(ctx.payload["log"], "end", ctx, ctx.payload.get("scope", "-"))
    return None


@app.handler("call_model")
def call_model(ctx: JobContext) -> dict[str, Any]:
    _record(ctx.payload["log"], "start", ctx, "kind:call_model")
    return None
