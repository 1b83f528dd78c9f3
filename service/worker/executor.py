"""Run one handler, return an :class:`Outcome`. No database here.

Run, decide, persist are three steps: the executor runs the handler and says
what happened; the worker decides (with the kind's ceiling and
:mod:`service.retry`) and the store persists, fenced by the lease.
"""

from __future__ import annotations

import asyncio
import traceback
from dataclasses import dataclass
from typing import Any

from service.errors import InvalidInput, PermanentError
from service.jobs import JSON
from service.payloads import dump_json
from service.worker.context import JobContext, JobStopped, StopReason
from service.worker.registry import HandlerSpec

MAX_ERROR_CHARS = 8_000
"""Stored errors keep their first line (type and message: what failures group by)
and the end of the traceback (where it broke), cut in the middle past this size."""


@dataclass(frozen=True)
class Succeeded:
    result: JSON


@dataclass(frozen=True)
class Failed:
    error: str
    retryable: bool


@dataclass(frozen=True)
class Stopped:
    """The handler returned or raised after it was told to stop; what it produced is dropped."""

    reason: StopReason


Outcome = Succeeded | Failed | Stopped


def execute(spec: HandlerSpec, ctx: JobContext) -> Outcome:
    """Run ``spec.fn(ctx)`` to the end and say how it went. Never raises."""
    try:
        result = _run_async(spec, ctx) if spec.is_async else spec.fn(ctx)
    except JobStopped as exc:
        return Stopped(ctx.stop_reason or exc.reason)
    except PermanentError as exc:
        if ctx.stop_reason is not None:
            return Stopped(ctx.stop_reason)
        return Failed(format_error(exc), retryable=False)
    except BaseException as exc:  # noqa: BLE001 - a handler's failure must never kill its slot
        if ctx.stop_reason is not None:
            return Stopped(ctx.stop_reason)  # whatever it raised, it raised because it was stopped
        return Failed(format_error(exc), retryable=True)
    if ctx.stop_reason is not None:
        return Stopped(ctx.stop_reason)
    try:
        dump_json(result, "result")
    except InvalidInput as exc:
        # The same code will return the same thing: retrying cannot help.
        return Failed(f"InvalidResult: the handler returned a value that is not JSON ({exc})", retryable=False)
    return Succeeded(result)


def _run_async(spec: HandlerSpec, ctx: JobContext) -> Any:
    """An async handler on an event loop of its own, in this (the job's) thread."""

    async def main() -> Any:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None

        def cancel() -> None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop already closed: the handler is done anyway
                pass

        ctx.on_stop(cancel)
        return await spec.fn(ctx)

    return asyncio.run(main())


def format_error(exc: BaseException) -> str:
    """``Type: message`` on the first line, then the traceback; cut to MAX_ERROR_CHARS."""
    message = str(exc).strip()
    head = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    head = head.splitlines()[0] if head else type(exc).__name__
    body = "".join(traceback.format_exception(exc)).rstrip()
    text = f"{head}\n\n{body}"
    if len(text) <= MAX_ERROR_CHARS:
        return text
    marker = "\n  [... traceback cut ...]\n"
    keep_head = min(len(head) + 2, MAX_ERROR_CHARS // 4)
    keep_tail = MAX_ERROR_CHARS - keep_head - len(marker)
    return text[:keep_head] + marker + text[-keep_tail:]
