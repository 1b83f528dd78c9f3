"""Jittered waits: retries after database errors, and poll intervals."""

from __future__ import annotations

import random


class Backoff:
    """Exponential backoff with jitter: the n-th wait is uniform in [c/2, c], c = min(cap, base * 2**n).

    Half the ceiling is kept so a retry loop never spins; the other half spreads
    a fleet that lost the database together so it does not come back together.
    """

    def __init__(self, base: float = 0.1, cap: float = 5.0, rng: random.Random | None = None) -> None:
        self.base = base
        self.cap = cap
        self.failures = 0
        self._rng = rng or random.Random()

    def next(self) -> float:
        ceiling = min(self.cap, self.base * 2.0 ** min(self.failures, 30))
        self.failures += 1
        return self._rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0


def jittered(seconds: float, rng: random.Random | None = None, spread: float = 0.5) -> float:
    """``seconds`` +- ``spread`` (a fraction), so a fleet's polls do not line up."""
    return (rng or random).uniform(seconds * (1 - spread), seconds * (1 + spread))
