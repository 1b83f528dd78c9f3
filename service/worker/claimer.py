"""The claim loop: claims for the worker's free slots, and waits cheaply while there is no work.

Each round looks for work when a slot is free, then sleeps until a slot frees, a wake-up
arrives (:mod:`service.worker.listener`, a reap that put jobs back) or the poll interval
passes (:class:`IdlePolls`):

- while claims find work, the worker claims directly, every ``poll_seconds`` (+-50 %)
  at the least;
- once a claim came back empty, the worker is idle: each look is first the store's
  ``has_claimable``, one read of the claim's index, and the fair claim runs only when it
  says a job is due; and the waits between looks back off, with full jitter, to a ceiling
  that grows with the fleet (:class:`IdlePolls`). The first claim that takes a job makes
  it fast again;
- a claim that comes back empty while jobs are due (a scope's concurrency or rate limit
  holds them) is not idleness: the worker claims again after a short wait that spreads
  over the fleet, without backing off (:meth:`IdlePolls.held`), so a rate-limited kind
  keeps its rate.

A notification wakes every listening worker at once (PostgreSQL signals them all).
An idle worker woken so waits a moment first (up to WAKE_SPREAD_SECONDS, less the more
slots it has free), then probes: the first one to look takes the job, and most of the
others find the index empty, a read instead of a claim.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from service.errors import StoreUnavailable
from service.store.base import Store
from service.worker.backoff import Backoff, jittered
from service.worker.health import StoreHealth
from service.worker.logs import log_event
from service.worker.slots import Slots

WAKE_SPREAD_SECONDS = 0.05
"""How long a woken idle worker with one free slot waits at most before it probes: a few
claims' time, so the first worker's claim commits before most of the others look."""


FLEET_SHARE = 2 / 3
"""An idle worker's ceiling is this × its peers × ``max_poll_seconds`` (see IdlePolls)."""

FLEET_CEILING_SECONDS = 60.0
"""The longest an idle worker of a fleet waits between looks (unless ``max_poll_seconds`` is longer)."""


class IdlePolls:
    """When the claim loop looks again without a wake-up.

    While looks find work: ``poll_seconds`` +- 50 %. After ``n`` looks in a row that found
    none: uniform in [0, c] (never below poll_seconds), c = poll_seconds * 2**n while that is
    under ``max_poll_seconds``, then the ceiling: full jitter, so an idle fleet's polls
    spread out instead of lining up.

    The ceiling is the fleet's, not the worker's: ``max_poll_seconds`` × FLEET_SHARE × its
    peers (the live workers sharing a queue with it that have a slot free, itself counted:
    service.maintenance.presence), at least ``max_poll_seconds`` and at most
    FLEET_CEILING_SECONDS. Why: a lone worker polling with full jitter to M finds a new job
    after M/3 on average (the residual of a wait uniform in [0, M]); N such workers polling
    to C look about 2N/C times a second between them, so one of them finds it after about
    C/(2N). C = 2/3 · N · M keeps the fleet's pickup at the lone worker's M/3 while each
    worker's polls fall as 1/N, until the cap (reached at 18 workers with M = 5 s; past it,
    pickup only gets faster). Busy workers do not poll, so they are not counted. It holds
    with NOTIFY on too: a notification wakes the fleet at once, but only enqueues and
    hand-backs notify; a delayed job or a retry coming due, a reaped job, a workflow's
    child freed by its parent, a scope's slot freed, are found by polls.
    """

    def __init__(
        self,
        poll_seconds: float,
        max_poll_seconds: float,
        rng: random.Random | None = None,
        *,
        peers: Callable[[], int] = lambda: 1,
    ) -> None:
        self.poll_seconds = poll_seconds
        self.max_poll_seconds = max_poll_seconds
        self.peers = peers
        self.empty = 0
        self.holding = False
        self._rng = rng or random.Random()

    def ceiling(self) -> float:
        """The longest wait between an idle worker's looks now."""
        fleet = FLEET_SHARE * max(self.peers(), 1) * self.max_poll_seconds
        return max(self.max_poll_seconds, min(fleet, FLEET_CEILING_SECONDS))

    @property
    def idle(self) -> bool:
        """The last look found no work."""
        return self.empty > 0

    def found(self) -> None:
        self.empty = 0
        self.holding = False

    def missed(self) -> None:
        self.empty += 1
        self.holding = False

    def held(self) -> None:
        """Jobs are due but the claim took none: a limit holds them, and frees them soon."""
        self.empty = 0
        self.holding = True

    def wait(self) -> float:
        if self.holding:
            # The fleet's looks, together, come every poll_seconds/3 or so (the ceiling's
            # argument, at poll_seconds instead of max_poll_seconds): a rate window that opens
            # is met within a fraction of poll_seconds, whatever the fleet's size, and no more
            # claims are spent on held work by a thousand workers than by three. Backing off
            # here instead left a rate limit of 20/s with whole seconds of no starts (CI, 3 Dec).
            held = FLEET_SHARE * max(self.peers(), 1) * self.poll_seconds
            return self._rng.uniform(0, max(self.poll_seconds, min(held, self.max_poll_seconds)))
        if not self.idle:
            return jittered(self.poll_seconds, self._rng)
        ramp = self.poll_seconds * 2.0 ** min(self.empty, 30)
        # Doubling while under max_poll_seconds (a worker that just ran dry finds a burst's next job
        # soon); past it, the fleet's ceiling at once: there the fleet's pickup is M/3 whatever C,
        # and doubling on to 60 s would take a newly idle fleet half a minute of polls (issue 24).
        ceiling = ramp if ramp < self.max_poll_seconds else self.ceiling()
        return self._rng.uniform(0, max(ceiling, self.poll_seconds))


class ClaimLoop:
    def __init__(
        self,
        store: Store,
        slots: Slots,
        health: StoreHealth,
        polls: IdlePolls,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.slots = slots
        self.health = health
        self.polls = polls
        self.clock = clock
        self._notified = threading.Event()

    def notified(self) -> None:
        """A notification named one of this worker's queues (the listener's callback)."""
        self._notified.set()
        self.slots.wake.set()

    def run(self) -> None:
        """Claim until the slots stop."""
        slots = self.slots
        backoff = Backoff()
        while not slots.stopping.is_set():
            slots.wake.clear()
            notified = self._notified.is_set()
            self._notified.clear()
            free = slots.free
            if free > 0:
                try:
                    claimed = self._look(free, notified)
                except StoreUnavailable as exc:
                    self.health.failed(exc, "claim")
                    slots.wake.wait(backoff.next())
                    continue
                except Exception:
                    log_event("worker.claim_error", logging.ERROR, exc_info=True, worker=slots.request.worker)
                    slots.wake.wait(backoff.next())
                    continue
                self.health.ok()
                backoff.reset()
                if claimed == free:
                    continue  # every slot is taken: wait for one to free (next round)
            slots.wake.wait(self.polls.wait())

    def _look(self, free: int, notified: bool) -> int:
        """Claim for the free slots (an idle worker probes first); how many jobs were claimed."""
        probed = self.polls.idle or self.polls.holding
        if probed:
            if notified and self.polls.idle:
                # Spread the fleet woken together; a worker with more free slots looks sooner.
                if self.slots.stopping.wait(random.uniform(0, WAKE_SPREAD_SECONDS / free)):
                    return 0
            if not self.store.has_claimable(self.slots.request.queues, self.slots.request.kinds):
                self.polls.missed()
                return 0
        request = self.slots.claim_request(free)
        if request is None:  # stopping
            return 0
        sent = self.clock()
        jobs = self.store.claim(
            request.worker, request.queues, free, request.lease_seconds, request.kinds, dict(request.max_attempts)
        )
        self.slots.fill(jobs, sent)
        if jobs:
            self.polls.found()
        elif probed:
            self.polls.held()  # the index has due jobs, and the claim took none: limits hold them
        else:
            self.polls.missed()
        return len(jobs)
