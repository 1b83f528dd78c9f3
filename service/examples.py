"""Example handlers, for ``jobq dev``, the quickstart and the tests: ``jobq worker --app service.examples``.

- ``classify``: payload ``{"items": [...], "delay": 0.05, "failure_rate": 0.0}``. A fake,
  deterministic model labels each item; built on ``ctx.items()``, so a reclaimed
  job resumes after the last checkpoint. Result ``{"results": [{"item", "label", "score"}, ...]}``.
- ``enrich``: payload ``{"rows": [...], "delay": 0.01}``. One outcome per row, built on
  ``ctx.map()``: a number is ok with ``{"row", "square"}``, anything else fails that row
  only (up to 10 % of the rows may fail, ``max_item_failures=0.1``). Result ``{"rows": [...]}``,
  the ok rows; ``GET /v1/jobs/{id}/items`` has every outcome, while the job runs too.
- ``sleep``: payload ``{"seconds": S}``; reports progress every tenth of a second; stops when told.
- ``fail``: payload ``{"permanent": bool, "message": str}``; raises, permanently or not.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

from service.errors import PermanentError
from service.worker import App, JobContext

app = App("examples")

LABELS = ("positive", "negative", "neutral")


class ModelError(RuntimeError):
    """The fake model's transient failure (think: a GPU that fell over); the job is retried."""


@dataclass
class FakeModel:
    """Deterministic labels (a hash of the item), a per-item delay and a random failure rate."""

    delay: float = 0.05
    failure_rate: float = 0.0
    rng: random.Random = field(default_factory=random.Random)

    def __call__(self, item: Any) -> dict[str, Any]:
        if self.delay > 0:
            time.sleep(self.delay)
        if self.failure_rate > 0 and self.rng.random() < self.failure_rate:
            raise ModelError(f"model failed on item {item!r}")
        digest = hashlib.sha256(json.dumps(item, sort_keys=True).encode()).digest()
        return {"label": LABELS[digest[0] % len(LABELS)], "score": round(digest[1] / 255, 3)}


def classify_items(ctx: JobContext, model: Any) -> dict[str, Any]:
    """Label ``ctx.payload["items"]`` one by one, resumably: results live in ``ctx.state``."""
    items = ctx.payload.get("items")
    if not isinstance(items, list):
        raise PermanentError("payload.items must be a list")
    results: list[dict[str, Any]] = ctx.state.setdefault("results", [])
    for item in ctx.items(items):
        results.append({"item": item, **model(item)})
    return {"results": results}


@app.handler("classify")
def classify(ctx: JobContext) -> dict[str, Any]:
    try:
        delay = float(ctx.payload.get("delay", 0.05))
        failure_rate = float(ctx.payload.get("failure_rate", 0.0))
    except (TypeError, ValueError):
        raise PermanentError("payload.delay and payload.failure_rate must be numbers") from None
    if not (0 <= delay <= 60 and 0 <= failure_rate <= 1):
        raise PermanentError("payload.delay must be in [0, 60] and payload.failure_rate in [0, 1]")
    return classify_items(ctx, FakeModel(delay=delay, failure_rate=failure_rate))


def square(row: Any) -> dict[str, Any]:
    """The example's per-row work: a number squared; anything else is that row's error."""
    if not isinstance(row, int | float) or isinstance(row, bool):
        raise ValueError(f"row {row!r} is not a number")
    return {"row": row, "square": row * row}


@app.handler("enrich", max_item_failures=0.1)  # up to 10 % of the rows may fail; past that, retried
def enrich(ctx: JobContext) -> dict[str, Any]:
    rows, delay = ctx.payload.get("rows"), ctx.payload.get("delay", 0.01)
    if not isinstance(rows, list):
        raise PermanentError("payload.rows must be a list")
    if not isinstance(delay, int | float) or not 0 <= delay <= 60:
        raise PermanentError("payload.delay must be a number of seconds in [0, 60]")

    def slowly(row: Any) -> dict[str, Any]:
        time.sleep(delay)
        return square(row)

    return {"rows": ctx.map(rows, slowly)}  # one outcome per row


@app.handler("sleep")
def sleep(ctx: JobContext) -> dict[str, Any]:
    seconds = ctx.payload.get("seconds", 1)
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not 0 <= seconds <= 86_400:
        raise PermanentError("payload.seconds must be a number of seconds in [0, 86400]")
    ticks = max(1, math.ceil(seconds * 10))
    started = time.monotonic()
    for tick in range(ticks):
        ctx.progress(tick, ticks)
        if ctx.wait(started + (tick + 1) * seconds / ticks - time.monotonic()):
            ctx.raise_if_stopped()
    ctx.progress(ticks, ticks)
    return {"slept": seconds}


@app.handler("fail")
def fail(ctx: JobContext) -> None:
    message = str(ctx.payload.get("message", "this job was asked to fail"))
    if ctx.payload.get("permanent", False):
        raise PermanentError(message)
    raise RuntimeError(message)
