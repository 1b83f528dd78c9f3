"""Run one handler, return an :class:`Outcome`. No database here.

Run, decide, persist are three steps: the executor runs the handler and says
what happened; the worker decides (with the kind's ceiling and
:mod:`service.retry`) and the store persists, fenced by the lease.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from service.errors import InvalidInput, PermanentError
from service.jobs import JSON
from service.payloads import dump_json
from service.worker.context import JobContext, JobStopped, StopReason
from service.worker.registry import HandlerSpec
from service.worker.tracebacks import format_error


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
    if ctx.refused is not None:
        # An item's result the store refused (too large): the same code records it again.
        return Failed(ctx.refused, retryable=False)
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
