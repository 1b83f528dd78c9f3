"""The retry policy: when a failed attempt runs again. Pure; no I/O.

Exponential backoff with full jitter (the delay is uniform in
``[0, min(cap, base * 2 ** (attempt - 1))]``), so jobs that failed together do
not retry together.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


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

    def should_retry(self, attempt: int, max_attempts: int, retryable: bool) -> bool:
        return retryable and attempt < max_attempts
