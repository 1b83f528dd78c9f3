"""Handlers the worker tests run in real ``jobq worker`` processes (``--app tests.worker.apps``).

The processes find this module through ``PYTHONPATH`` (the repository root); see
``harness.py``. Test-only hooks (call logs, marker files) live here, not in
``service.examples``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from service.examples import FakeModel, classify_items
from service.examples import app as examples
from service.worker import App, JobContext

app = App("worker-tests")
for spec in examples:
    if spec.kind != "classify":
        app.register(spec.kind, spec.fn, queue=spec.queue)


def _append(path: str | os.PathLike[str], line: str) -> None:
    # O_APPEND: concurrent writers' short lines never interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


class CountingModel:
    """The example model, logging ``attempt item`` for every call (items are their own indexes)."""

    def __init__(self, model: FakeModel, log: str, attempt: int) -> None:
        self.model, self.log, self.attempt = model, log, attempt

    def __call__(self, item: Any) -> dict[str, Any]:
        _append(self.log, f"{self.attempt} {item}")
        return self.model(item)


@app.handler("classify")
def classify(ctx: JobContext) -> dict[str, Any]:
    model = FakeModel(delay=float(ctx.payload.get("delay", 0.05)))
    return classify_items(ctx, CountingModel(model, ctx.payload["call_log"], ctx.attempt))


# -- a side effect in the database, keyed by the job id (the chaos test) -------------------

_pool_lock = threading.Lock()
_connections: list[psycopg.Connection[Any]] = []


def _side_effect_url() -> str:
    return os.environ["JOBQ_SIDE_EFFECT_URL"]


def _connection() -> psycopg.Connection[Any]:
    with _pool_lock:
        if _connections:
            return _connections.pop()
    return psycopg.connect(_side_effect_url(), autocommit=True)


def _give_back(conn: psycopg.Connection[Any]) -> None:
    with _pool_lock:
        _connections.append(conn)


@app.handler("side_effect")
def side_effect(ctx: JobContext) -> dict[str, Any]:
    """Sleep, then record the job id once (the job id is the idempotency key), and every run."""
    time.sleep(float(ctx.payload.get("sleep", 0.05)))
    conn = _connection()
    try:
        conn.execute(
            "INSERT INTO side_effects (job_id, worker) VALUES (%s, %s) ON CONFLICT (job_id) DO NOTHING",
            [ctx.job_id, ctx.worker_id],
        )
        conn.execute(
            "INSERT INTO side_effect_runs (job_id, worker, attempt) VALUES (%s, %s, %s)",
            [ctx.job_id, ctx.worker_id, ctx.attempt],
        )
    except psycopg.Error:
        conn.close()
        raise
    _give_back(conn)
    return {"worker": ctx.worker_id}


# -- probes: marker files say when a handler started and when it was told to stop ------------


def _marker(ctx: JobContext, name: str, **fields: Any) -> None:
    directory = Path(ctx.payload["markers"])
    record = {"job_id": str(ctx.job_id), "attempt": ctx.attempt, "worker": ctx.worker_id, "at": time.time(), **fields}
    _append(directory / f"{ctx.job_id}.{name}", json.dumps(record))


@app.handler("probe")
def probe(ctx: JobContext) -> dict[str, Any]:
    """Run for ``seconds`` (``later_seconds`` on runs after the first) unless told to stop.

    Told to stop, it writes a ``stopped`` marker with the reason; with
    ``return_when_stopped`` it then returns a (late) result anyway, which the worker
    must discard.
    """
    _marker(ctx, "start")
    # A run that finds an earlier run's checkpoint is a later run (a hand-back keeps the attempt number).
    earlier = ctx.last_checkpoint
    ctx.checkpoint({"runs": (earlier or {}).get("runs", 0) + 1})
    seconds = ctx.payload.get("later_seconds", 0) if earlier else ctx.payload.get("seconds", 60)
    if ctx.wait(float(seconds)):
        _marker(ctx, "stopped", reason=ctx.stop_reason.value if ctx.stop_reason else None)
        if not ctx.payload.get("return_when_stopped"):
            ctx.raise_if_stopped()
        return {"worker": ctx.worker_id, "attempt": ctx.attempt, "late": True}
    return {"worker": ctx.worker_id, "attempt": ctx.attempt}


@app.handler("stamp")
def stamp(ctx: JobContext) -> None:
    """Say when the handler started (wall clock; the test compares with its enqueue time)."""
    _marker(ctx, "start")


@app.handler("poison")
def poison(ctx: JobContext) -> None:
    """Kill the whole worker process, every time."""
    os._exit(17)


@app.handler("numbered")
def numbered(ctx: JobContext) -> list[Any]:
    """``count`` items, ``delay`` seconds each, one outcome per item; logs ``attempt index`` for every item run."""
    delay = float(ctx.payload.get("delay", 0.01))

    def one(index: int) -> dict[str, int]:
        time.sleep(delay)
        _append(ctx.payload["call_log"], f"{ctx.attempt} {index}")
        return {"index": index, "attempt": ctx.attempt}

    return ctx.map(list(range(int(ctx.payload["count"]))), one)


# -- workflows: a fan-out from a handler, its leaves, the fan-in, and a chain's links ----------
# The kills of the workflow process tests are theirs, not the jobs' fault: a job may be cut
# short several times (one SIGKILL every 2 s), and must not run out of attempts doing so
# (a run ended with 3 jobs failed or cancelled, at the default of 3 attempts).
KILLED_OFTEN = 20


@app.handler("fan_out", max_attempts=KILLED_OFTEN)
def fan_out(ctx: JobContext) -> dict[str, Any]:
    """Enqueue ``leaves`` leaf jobs and one fan_in job waiting for all of them (ctx.enqueue)."""
    leaves = [ctx.enqueue("leaf", {"n": n, "markers": ctx.payload["markers"]}) for n in range(ctx.payload["leaves"])]
    ctx.enqueue("fan_in", {"markers": ctx.payload["markers"]}, depends_on=leaves)
    return {"leaves": len(leaves)}


@app.handler("leaf", max_attempts=KILLED_OFTEN)
def leaf(ctx: JobContext) -> dict[str, Any]:
    time.sleep(0.05 + (ctx.payload["n"] % 5) * 0.05)
    return {"n": ctx.payload["n"]}


@app.handler("fan_in", max_attempts=KILLED_OFTEN)
def fan_in(ctx: JobContext) -> dict[str, Any]:
    """Record what it saw of its parents: how many, in which states, their results."""
    parents = ctx.parents()
    _marker(
        ctx,
        "fan_in",
        parents=len(parents),
        states=sorted({p.state.value for p in parents}),
        ns=[p.result["n"] if isinstance(p.result, dict) else None for p in parents],
    )
    return {"parents": len(parents)}


@app.handler("link")
def link(ctx: JobContext) -> dict[str, Any]:
    """A link of a chain: its parent's result is the previous link's number."""
    _marker(ctx, "link", n=ctx.payload["n"], parent=list(ctx.parent_results().values()))
    return {"n": ctx.payload["n"]}


@app.handler("parenting")
def parenting(ctx: JobContext) -> dict[str, Any]:
    """Enqueue three children naming this attempt; the first attempt then sleeps ``seconds``
    (not told to stop: a paused worker wakes and tries to write its result and children)."""
    for n in range(3):
        ctx.enqueue("leaf", {"n": n, "attempt": ctx.attempt})
    if ctx.attempt == 1:
        time.sleep(float(ctx.payload.get("seconds", 0)))
    return {"attempt": ctx.attempt}


@app.handler("gated")
def gated(ctx: JobContext) -> dict[str, Any]:
    """Fail while the file ``gate`` does not exist, succeed once it does (a parent the test
    makes fail for good, then replays)."""
    if not Path(ctx.payload["gate"]).exists():
        raise RuntimeError("the gate is closed")
    return {"gate": "open"}
