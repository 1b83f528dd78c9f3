"""The handlers the benches run: ``jobq worker --app bench.handlers``.

- ``noop``: returns ``{}`` at once — queue overhead and nothing else.
- ``items``: ``count`` items, ``delay`` seconds each, one outcome per item (``ctx.map``).
- ``steps``: the same loop with progress only (``ctx.items``, no outcomes): the reference
  the ``items`` job's cost is compared with.
- ``pickup``: tells the bench, over a local datagram socket named in the payload,
  the ``time.monotonic()`` at which the handler started (CLOCK_MONOTONIC is one
  clock for every process on the host), then returns.
- ``sleep``: runs ``payload["seconds"]`` (a job to kill a worker under; ``bench reap``).
"""

from __future__ import annotations

import socket
import time

from service.worker import App, JobContext

app = App("bench")


@app.handler("noop")
def noop(ctx: JobContext) -> dict[str, object]:
    return {}


@app.handler("pickup")
def pickup(ctx: JobContext) -> dict[str, object]:
    started = time.monotonic()
    address = ctx.payload.get("socket")
    if isinstance(address, str):
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(f"{ctx.payload.get('trial')} {started!r}".encode(), address)
    return {}


@app.handler("items")
def items(ctx: JobContext) -> dict[str, object]:
    delay = float(ctx.payload.get("delay", 0.0))

    def one(index: int) -> int:
        time.sleep(delay)
        return index

    return {"ok": len(ctx.map(range(int(ctx.payload["count"])), one))}


@app.handler("steps")
def steps(ctx: JobContext) -> dict[str, object]:
    delay = float(ctx.payload.get("delay", 0.0))
    for _ in ctx.items(range(int(ctx.payload["count"]))):
        time.sleep(delay)
    return {}


@app.handler("sleep")
def sleep(ctx: JobContext) -> dict[str, object]:
    """Runs ``payload["seconds"]`` (default 600), stopping early when asked: a job to kill a worker under."""
    ctx.wait(float(ctx.payload.get("seconds", 600)))  # type: ignore[arg-type]
    return {}
