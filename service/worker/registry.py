"""Handlers by kind: the :class:`App` a worker runs, and how ``--app`` finds it.

    app = App()

    @app.handler("thumbnail", max_attempts=5, timeout=600)
    def thumbnail(ctx: JobContext) -> dict:
        ...

A handler takes one :class:`~service.worker.context.JobContext` and returns the
job's result (any JSON value). It may be a plain function or an ``async def``;
an async handler runs on an event loop of its own in the job's thread.
"""

from __future__ import annotations

import importlib
import inspect
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from service.errors import InvalidInput
from service.items import ItemFailureLimit, check_limit
from service.jobs import JSON
from service.payloads import MAX_ATTEMPTS_LIMIT, MAX_NAME_LENGTH, check_lease_seconds
from service.schedules import CatchUp, ScheduleSource, ScheduleSpec, catch_up_of, validate_spec

if TYPE_CHECKING:
    from service.worker.context import JobContext

Handler = Callable[["JobContext"], Any]
F = TypeVar("F", bound=Handler)

DEFAULT_QUEUE = "default"


@dataclass(frozen=True)
class HandlerSpec:
    """One kind: its function and per-kind defaults (``None``: the worker's default)."""

    kind: str
    fn: Handler
    queue: str = DEFAULT_QUEUE
    max_attempts: int | None = None
    """Attempts for this kind's jobs: the default of a job enqueued without max_attempts,
    and a ceiling on a job's own (the claim writes the result into the job)."""
    lease_seconds: float | None = None
    """The lease this kind's heartbeats renew; long-running kinds need no longer one,
    since heartbeats keep it alive, but a kind whose handler blocks the GIL may."""
    timeout: float | None = None
    """Wall-clock seconds one attempt may run; past it the handler is told to stop
    and the attempt fails (retryable) as "timed out"."""
    max_item_failures: ItemFailureLimit = None
    """Failed items a job may finish with (a count, or a ratio of its items; None: no limit).
    Past it the attempt fails as retryable, and the next attempt runs the failed items again."""

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


class App:
    """A registry of handlers by kind. A worker runs the kinds of one app."""

    def __init__(self, name: str = "jobq") -> None:
        self.name = name
        self._specs: dict[str, HandlerSpec] = {}
        self._schedules: dict[str, ScheduleSpec] = {}
        self._schedule_queues: dict[str, str | None] = {}  # None: the kind's handler's queue

    def handler(
        self,
        kind: str | None = None,
        *,
        queue: str = DEFAULT_QUEUE,
        max_attempts: int | None = None,
        lease_seconds: float | None = None,
        timeout: float | None = None,
        max_item_failures: ItemFailureLimit = None,
    ) -> Callable[[F], F]:
        """Register the decorated function for ``kind`` (default: the function's name)."""

        def register(fn: F) -> F:
            self.register(
                kind or fn.__name__,
                fn,
                queue=queue,
                max_attempts=max_attempts,
                lease_seconds=lease_seconds,
                timeout=timeout,
                max_item_failures=max_item_failures,
            )
            return fn

        return register

    def register(
        self,
        kind: str,
        fn: Handler,
        *,
        queue: str = DEFAULT_QUEUE,
        max_attempts: int | None = None,
        lease_seconds: float | None = None,
        timeout: float | None = None,
        max_item_failures: ItemFailureLimit = None,
    ) -> HandlerSpec:
        if not isinstance(kind, str) or not kind.strip() or len(kind) > MAX_NAME_LENGTH:
            raise InvalidInput(f"a handler's kind must be a non-empty string of at most {MAX_NAME_LENGTH} characters")
        if kind in self._specs:
            raise InvalidInput(f"kind {kind!r} already has a handler in app {self.name!r}")
        if not callable(fn):
            raise InvalidInput(f"the handler for {kind!r} is not callable")
        if not isinstance(queue, str) or not queue.strip():
            raise InvalidInput(f"the queue of {kind!r} must be a non-empty string")
        if max_attempts is not None and not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise InvalidInput(f"max_attempts of {kind!r} must be from 1 to {MAX_ATTEMPTS_LIMIT}")
        if lease_seconds is not None:
            check_lease_seconds(lease_seconds, f"lease_seconds of {kind!r}")
        if timeout is not None and not timeout > 0:
            raise InvalidInput(f"timeout of {kind!r} must be positive")
        check_limit(max_item_failures, f"max_item_failures of {kind!r}")
        spec = HandlerSpec(kind, fn, queue, max_attempts, lease_seconds, timeout, max_item_failures)
        self._specs[kind] = spec
        return spec

    def periodic(
        self,
        cron: str,
        *,
        kind: str | None = None,
        name: str | None = None,
        payload: dict[str, JSON] | None = None,
        queue: str | None = None,
        timezone: str = "UTC",
        catch_up: CatchUp | str = CatchUp.ONE,
        tenant: str = "default",
    ) -> Callable[[F], F]:
        """Enqueue a job of the decorated handler's kind on every tick of ``cron``, read in
        ``timezone`` (service.schedules). Put it above ``@app.handler``; ``kind`` defaults to
        the handler's, ``name`` to the kind, ``queue`` to the handler's queue. Workers of this
        app write the schedule at start; ``jobq schedule`` pauses, resumes or lists it."""

        def register(fn: F) -> F:
            handled = next((spec.kind for spec in self._specs.values() if spec.fn is fn), None)
            self.schedule(
                cron,
                kind=kind or handled or fn.__name__,
                name=name,
                payload=payload,
                queue=queue,
                timezone=timezone,
                catch_up=catch_up,
                tenant=tenant,
            )
            return fn

        return register

    def schedule(
        self,
        cron: str,
        *,
        kind: str,
        name: str | None = None,
        payload: dict[str, JSON] | None = None,
        queue: str | None = None,
        timezone: str = "UTC",
        catch_up: CatchUp | str = CatchUp.ONE,
        tenant: str = "default",
    ) -> ScheduleSpec:
        """``periodic`` without a decorator: a schedule for any kind."""
        spec = validate_spec(
            ScheduleSpec(
                name=name or kind,
                cron=cron,
                kind=kind,
                payload=dict(payload or {}),
                queue=queue or DEFAULT_QUEUE,
                tenant=tenant,
                timezone=timezone,
                catch_up=catch_up_of(catch_up),
                source=ScheduleSource.CODE,
            )
        )
        if spec.name in self._schedules:
            raise InvalidInput(f"schedule {spec.name!r} is declared twice in app {self.name!r} (give each a name=)")
        self._schedules[spec.name] = spec
        self._schedule_queues[spec.name] = queue
        return spec

    @property
    def schedules(self) -> tuple[ScheduleSpec, ...]:
        """The declared schedules; one without a queue of its own takes its kind's handler's."""
        return tuple(
            spec
            if self._schedule_queues[name] is not None or spec.kind not in self._specs
            else replace(spec, queue=self._specs[spec.kind].queue)
            for name, spec in sorted(self._schedules.items())
        )

    def include(self, other: App) -> None:
        """Register every handler and schedule of ``other`` here too (one worker, several apps)."""
        for name, schedule in other._schedules.items():
            if name in self._schedules:
                raise InvalidInput(f"schedule {name!r} is declared in app {self.name!r} and in {other.name!r}")
            self._schedules[name] = schedule
            self._schedule_queues[name] = other._schedule_queues[name]
        for spec in other:
            self.register(
                spec.kind,
                spec.fn,
                queue=spec.queue,
                max_attempts=spec.max_attempts,
                lease_seconds=spec.lease_seconds,
                timeout=spec.timeout,
                max_item_failures=spec.max_item_failures,
            )

    def spec(self, kind: str) -> HandlerSpec:
        try:
            return self._specs[kind]
        except KeyError:
            raise InvalidInput(f"no handler for kind {kind!r} in app {self.name!r}") from None

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted(self._specs))

    @property
    def max_attempts(self) -> dict[str, int]:
        """Per kind that sets one, its handler's max_attempts (the claim applies them)."""
        return {kind: spec.max_attempts for kind, spec in self._specs.items() if spec.max_attempts is not None}

    @property
    def queues(self) -> tuple[str, ...]:
        return tuple(sorted({spec.queue for spec in self._specs.values()}))

    def __contains__(self, kind: object) -> bool:
        return kind in self._specs

    def __iter__(self) -> Iterator[HandlerSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def __repr__(self) -> str:
        return f"App({self.name!r}, kinds={list(self.kinds)})"


class AppImportFailed(InvalidInput):
    """Importing the ``--app`` module raised: one line says the module, the exception and the file
    and line where it was raised; ``__cause__`` keeps the whole traceback."""

    def __init__(self, reference: str, exc: Exception) -> None:
        super().__init__(
            f"--app {reference}: importing it raised {type(exc).__name__}: {_first_line(exc)} at {_where(exc)}"
        )


def _first_line(exc: Exception) -> str:
    text = (exc.msg if isinstance(exc, SyntaxError) and exc.msg else str(exc)).strip()
    return text.splitlines()[0] if text else "(no message)"


def _where(exc: Exception) -> str:
    """file:line where it was raised: the innermost frame (a SyntaxError names the line it could not parse)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "(unknown place)"


def load_app(reference: str) -> App:
    """The :class:`App` named by ``module[:attribute]`` (attribute default ``app``)."""
    module_name, _, attribute = reference.partition(":")
    attribute = attribute or "app"
    if not module_name:
        raise InvalidInput(f"--app must look like module[:attribute], not {reference!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise InvalidInput(f"--app {reference}: no module named {exc.name!r} (is it on PYTHONPATH?)") from exc
        raise AppImportFailed(reference, exc) from exc
    except Exception as exc:  # the module's own code raised (a SyntaxError too)
        raise AppImportFailed(reference, exc) from exc
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise InvalidInput(f"--app {reference}: module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(app, App):
        raise InvalidInput(f"--app {reference}: {attribute!r} is a {type(app).__name__}, not a jobq App")
    if not len(app):
        raise InvalidInput(f"--app {reference}: the app registers no handlers")
    return app
