"""The handlers the benches run: ``jobq worker --app bench.handlers``.

- ``noop``: returns ``{}`` at once — queue overhead and nothing else.
- ``pickup``: tells the bench, over a local datagram socket named in the payload,
  the ``time.monotonic()`` at which the handler started (CLOCK_MONOTONIC is one
  clock for every process on the host), then returns.
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
