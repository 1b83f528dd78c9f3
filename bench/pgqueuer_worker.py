"""A PgQueuer worker of no-op jobs, for ``python -m bench compare`` (needs the ``bench`` extra).

    python -m bench.pgqueuer_worker URL [--batch-size 10] [--max-concurrent-tasks 0]

One asyncpg connection (PgQueuer's own driver and its documented setup), uvloop,
entrypoint ``noop`` that returns at once, ``QueueManager.run`` with the given
batch size and cap (0: PgQueuer's default, no cap) until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

import asyncpg
import uvloop
from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager

APPLICATION_NAME = "bench-pgqueuer"
"""How the bench sees that a worker has connected (pg_stat_activity)."""


async def main(url: str, batch_size: int, max_concurrent_tasks: int) -> None:
    connection = await asyncpg.connect(url, server_settings={"application_name": APPLICATION_NAME})
    manager = QueueManager(Queries(AsyncpgDriver(connection)))

    @manager.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, manager.shutdown.set)
    await manager.run(batch_size=batch_size, max_concurrent_tasks=max_concurrent_tasks or None)
    await connection.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--max-concurrent-tasks", type=int, default=0)
    args = parser.parse_args()
    uvloop.run(main(args.url, args.batch_size, args.max_concurrent_tasks))
