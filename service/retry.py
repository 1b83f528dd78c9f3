"""The retry decision: whether a failed attempt runs again, and when. Pure; no I/O.

This is the one place the decision is made. The worker asks :meth:`RetryPolicy.decide`
when a handler fails, the reaper asks :meth:`RetryPolicy.delays_by_attempt` before it
reclaims expired leases (an expired lease is a retryable failure, due again at once),
and the stores persist what they are told: they hold no policy.

Backoff is exponential with full jitter (the delay is uniform in
``[0, min(cap, base * 2 ** (attempt - 1))]``), so jobs that failed together do
not retry together.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from service.payloads import MAX_ATTEMPTS_LIMIT


@dataclass(frozen=True)
class Retry:
    """Queue the job again, due ``delay_seconds`` from now (by the database clock)."""

    delay_seconds: float


@dataclass(frozen=True)
class GiveUp:
    """Fail the job: its attempts are spent, or its error is permanent."""


Decision = Retry | GiveUp


@dataclass(frozen=True)
class RetryPolicy:
    base_seconds: float = 2.0
    cap_seconds: float = 600.0

    def ceiling(self, attempt: int) -> float:
        """The largest delay after the given (1-based) attempt failed."""
        exponent = min(max(attempt - 1, 0), 60)
        return min(self.cap_seconds, self.base_seconds * 2.0**exponent)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """A jittered delay in seconds before the next attempt."""
        return (rng or random).uniform(0.0, self.ceiling(attempt))

    def decide(self, attempt: int, max_attempts: int, retryable: bool, rng: random.Random | None = None) -> Decision:
        """After attempt ``attempt`` (1-based) of ``max_attempts`` failed: retry with backoff, or give up."""
        if retryable and attempt < max_attempts:
            return Retry(self.delay(attempt, rng))
        return GiveUp()

    def delays_by_attempt(self) -> list[float]:
        """The reaper's decision, made before it knows which jobs expired: element ``a - 1``
        is the delay for a job whose attempt ``a`` lost its lease, if attempts remain.

        No backoff: an expired lease has already kept the job from running for about a
        lease (60 s by default) since its worker died, which spaces the attempts of a job
        that kills its worker more than the backoff would (2 s, 4 s, ...), and a job whose
        worker merely crashed should run again at once. A crash-looping job still fails
        after ``max_attempts``: the attempt is charged at claim."""
        return [0.0] * MAX_ATTEMPTS_LIMIT
