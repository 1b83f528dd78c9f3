"""Handlers the operations tests run in a real ``jobq worker`` (``--app tests.ops.apps``).

- ``flaky``: fails while the file named by ``payload["bug"]`` exists (the bug is
  deployed), succeeds once it is gone (the fix is deployed). Its errors carry the
  job id, the attempt and a memory address, as real ones do, so they must still
  fall into one failure group.
- ``hold``: keeps its worker busy (heartbeating) until the file named by
  ``payload["release"]`` exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from service.worker import App, JobContext

app = App("ops-tests")


@app.handler("flaky")
def flaky(ctx: JobContext) -> dict[str, Any]:
    if Path(ctx.payload["bug"]).exists():
        raise RuntimeError(f"row {ctx.job_id} could not be parsed (attempt {ctx.attempt}, buffer at {id(ctx):#x})")
    return {"ok": True, "attempt": ctx.attempt}


@app.handler("hold")
def hold(ctx: JobContext) -> dict[str, Any]:
    release = Path(ctx.payload["release"])
    while not release.exists():
        if ctx.wait(0.05):
            ctx.raise_if_stopped()
    return {"held": True}
