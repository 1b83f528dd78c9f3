"""A claim-and-complete loop run in its own OS process by the exactly-once test."""

from __future__ import annotations

from typing import Any

from service.config import Settings
from service.jobs import Completion
from service.store import open_store


def claim_and_complete(url: str, worker: str, batch: int, start: Any, results: Any) -> None:
    """Claim up to ``batch`` jobs at a time and complete them, until a claim comes back empty.

    One job at a time goes through ``complete``; batches go through ``complete_many``.
    Reports ``(worker, [job ids it completed])`` on ``results``, or ``(worker, error text)``.
    """
    store = open_store(Settings(database_url=url, pool_size=1, notify=False))
    done: list[str] = []
    try:
        start.wait(timeout=60)  # every process begins claiming at the same moment
        while jobs := store.claim(worker, ["default"], batch, 300):
            if batch == 1:
                store.complete(jobs[0].lease, {"by": worker})
            else:
                lost = store.complete_many([Completion(job.lease, {"by": worker}) for job in jobs])
                if lost:
                    raise AssertionError(f"complete_many lost {len(lost)} fresh leases")
            done += [str(job.id) for job in jobs]
        results.put((worker, done))
    except Exception as exc:  # reported to the parent, which fails the test with it
        results.put((worker, f"{type(exc).__name__}: {exc}"))
    finally:
        store.close()
