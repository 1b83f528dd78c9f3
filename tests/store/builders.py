"""Small builders the store tests share: a job to enqueue, a claim of exactly one job."""

from __future__ import annotations

from typing import Any

from service.jobs import ClaimedJob, FailResult, NewJob, ReapResult
from service.retry import RetryPolicy
from service.store import Store
from service.store.base import REAP_BATCH

LEASE_SECONDS = 30.0
DEFAULT_POLICY = RetryPolicy()


def new_job(kind: str = "resize", **fields: Any) -> NewJob:
    fields.setdefault("payload", {"image": "cat.png"})
    return NewJob(kind=kind, **fields)


def claim_one(
    store: Store,
    worker: str = "worker-a",
    *,
    queues: tuple[str, ...] = ("default",),
    lease_seconds: float = LEASE_SECONDS,
    kinds: list[str] | None = None,
) -> ClaimedJob:
    """Claim and return exactly one job (fails the test if the claim takes none or more)."""
    claimed = store.claim(worker, list(queues), 1, lease_seconds, kinds=kinds)
    assert len(claimed) == 1, f"expected to claim one job, claimed {len(claimed)}"
    return claimed[0]


def fail_job(
    store: Store, job: ClaimedJob, error: str, *, retryable: bool, policy: RetryPolicy = DEFAULT_POLICY
) -> FailResult:
    """Fail a claimed job as a worker does: service.retry decides, the store persists."""
    return store.fail(job.lease, error, policy.decide(job.attempt, job.max_attempts, retryable))


def reap(store: Store, policy: RetryPolicy = DEFAULT_POLICY, *, limit: int = REAP_BATCH) -> ReapResult:
    """Reap as a worker's reaper does: the policy draws the delays, the store reclaims."""
    return store.reap(policy.delays_by_attempt(), limit)
