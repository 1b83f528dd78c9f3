"""One batch enqueue of no-op jobs through jobq's store, for ``bench compare``.

    python bench/enqueue_once.py URL JOBS

Run as a script (not ``-m``) with PYTHONPATH at the checkout under test, so ``service``
comes from there (``--code``, ``--enqueue-reference``); it imports nothing of ``bench``.
It opens the store and makes the batch, prints ``ready``, waits for a line on stdin
(the parent samples the backends' CPU meanwhile), enqueues the batch in one call, and
prints one JSON line: the call's seconds and this process's CPU seconds during it.
"""

from __future__ import annotations

import json
import sys
import time

from service.config import Settings
from service.jobs import NewJob
from service.store import open_store


def main(url: str, jobs: int) -> None:
    store = open_store(Settings(database_url=url, notify=True))
    try:
        store.scope_usage()  # the pool's connection is up before the parent samples the backends
        batch = [NewJob(kind="noop") for _ in range(jobs)]
        print("ready", flush=True)
        sys.stdin.readline()
        cpu, started = time.process_time(), time.perf_counter()
        statuses = store.enqueue_many(batch)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert len(statuses) == jobs
        print(json.dumps({"seconds": elapsed, "cpu_seconds": cpu}), flush=True)
        sys.stdin.readline()  # the parent has sampled the backends again: the connection may close
    finally:
        store.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
