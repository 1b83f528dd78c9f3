"""Small builders the store tests share: a job to enqueue, a claim of exactly one job."""

from __future__ import annotations

from typing import Any

from service.jobs import ClaimedJob, NewJob
from service.store import Store

LEASE_SECONDS = 30.0


def new_job(kind: str = "resize", **fields: Any) -> NewJob:
    fields.setdefault("payload", {"image": "cat.png"})
    return NewJob(kind=kind, **fields)


def claim_one(store: Store, worker: str = "worker-a", *, queues: tuple[str, ...] = ("default",),
              lease_seconds: float = LEASE_SECONDS, kinds: list[str] | None = None) -> ClaimedJob:
    """Claim and return exactly one job (fails the test if the claim takes none or more)."""
    claimed = store.claim(worker, list(queues), 1, lease_seconds, kinds=kinds)
    assert len(claimed) == 1, f"expected to claim one job, claimed {len(claimed)}"
    return claimed[0]
