"""Leadership: one worker of the fleet at a time runs the maintenance duties (the reaper, the
scheduler, the rollup's fold, retention), not every worker.

The leader holds a lease on a row of ``leaders`` (service/store/*/leadership.py), taken and
renewed by one statement with the database clock, like a job's lease, so it works through a
transaction pooler. Every ``renew_seconds`` (a third of the lease, jittered) the leader
renews it; when the leader dies, stops (SIGSTOP) or is partitioned away, its lease runs out
and a candidate takes it with the next term, within the lease plus a tenth of it. A
candidate does not poll: the store tells it when the holder's lease ends and it comes back
then (with jitter), so an idle fleet's candidates cost about one statement per two-thirds
of a lease each.

The leader's writes carry its token (:meth:`Leadership.token`: name, owner, term), and the
store refuses a write whose token no longer holds an unexpired lease (LeadershipLost,
nothing written), so a deposed leader that has not noticed yet changes nothing. This
process also stops acting as leader on its own once a lease it could not renew would have
ended by its local clock (measured from before the renewal was sent, so never later than
the database's expiry, clock drift aside): the fence is the guarantee, this saves the work.

Wiring, in a worker's maintenance loop (one thread)::

    leadership = Leadership(store, owner=worker_id)
    reaper = Reaper(store, policy, leader=leadership.token)   # likewise Scheduler, Rollup, Pruner
    while not stopping:
        leadership.run_once()                       # acquire or renew (or learn when to try again)
        if leadership.is_leader():
            ...run the due duties; on LeadershipLost from one: leadership.lost(exc)...
        wait(min(leadership.next_interval(), the next duty's due time))
    leadership.resign()                             # graceful shutdown: a successor at once
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable

from service.errors import InvalidInput, LeadershipLost, StoreUnavailable
from service.store.base import MAINTENANCE, LeaderLease, Store

logger = logging.getLogger("jobq.maintenance")

LEASE_SECONDS = 15.0
"""The leadership's lease unless told otherwise: a dead leader's duties resume within it
(plus a tenth), and the leader renews three times in it."""

RETRY_FRACTION = 1 / 15
"""After a failed acquire or renewal (the database away), ``run_once`` is due again in this
fraction of the lease (1 s of the default 15): a leader keeps trying well before its lease
would run out, and a blip does not cost the fleet its leader."""

RENEW_JITTER = 0.1
"""A renewal is due every third of the lease, +-10 %; a candidate comes back at the holder's
expiry plus up to a tenth of the lease: takeover stays well inside one lease."""

LeaderToken = Callable[[], LeaderLease | None]
"""What a duty calls before each write for the token to fence it with: :meth:`Leadership.token`
(raises LeadershipLost when this process does not lead), or :func:`unfenced`."""


def unfenced() -> None:
    """No leadership (``jobq prune``, tests): the store's maintenance writes run unfenced."""
    return None


class Leadership:
    """This process's view of one leadership: whether it leads, and the token it writes with.

    ``run_once`` is called from one thread; ``is_leader``, ``token`` and ``current`` may be
    read from any."""

    def __init__(
        self,
        store: Store,
        owner: str,
        *,
        lease_seconds: float = LEASE_SECONDS,
        name: str = MAINTENANCE,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        acquire: Callable[[], tuple[LeaderLease | None, float]] | None = None,
        longest_wait: float = math.inf,
    ) -> None:
        """``acquire``: how the lease is asked for, answering as ``Store.acquire_leadership``
        (default: that, for this name and owner); a worker asks with its check-in
        (service.maintenance.presence), which touches its row in the same statement.
        ``longest_wait``: ``next_interval`` never answers more (the check-in is the worker's touch too)."""
        if not isinstance(lease_seconds, int | float) or not lease_seconds > 0:
            raise InvalidInput(f"a leadership's lease must be more than 0 seconds, not {lease_seconds!r}")
        self.store = store
        self._acquire = acquire or (lambda: store.acquire_leadership(self.name, self.owner, self.lease_seconds))
        self.longest_wait = longest_wait
        self.owner = owner
        self.name = name
        self.lease_seconds = float(lease_seconds)
        self._monotonic = monotonic
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._lease: LeaderLease | None = None
        self._until = 0.0  # by the monotonic clock: this process acts as leader until then
        self._retry_in = 0.0  # a candidate's wait until the holder's lease ends
        self._failed = False  # the last run_once met a store error

    @property
    def renew_seconds(self) -> float:
        return self.lease_seconds / 3

    def run_once(self) -> bool:
        """Acquire the leadership or renew it; True when this process leads now. A store error
        propagates (the loop's to log), and leadership lapses on its own at the local deadline."""
        started = self._monotonic()
        try:
            lease, free_in = self._acquire()
        except StoreUnavailable:
            self._failed = True
            self._lapse_if_due(started)
            raise
        with self._lock:
            self._failed = False
            previous, self._lease, self._until = self._lease, lease, started + self.lease_seconds
            self._retry_in = min(free_in, self.lease_seconds)
        if previous is not None and (lease is None or lease.term != previous.term):
            self._log_lost(previous, "another worker holds it" if lease is None else "its lease ran out unrenewed")
        if lease is not None and (previous is None or previous.term != lease.term):
            logger.info("leadership.gained", extra={"jobq_fields": self._fields(lease)})
        return lease is not None

    def next_interval(self) -> float:
        """Seconds until ``run_once`` is due again: a jittered third of the lease while leading;
        otherwise when the holder's lease ends, plus up to a tenth of the lease; after a store
        error, RETRY_FRACTION of the lease. Never more than ``longest_wait`` (less up to 20 %, so
        the workers' check-ins do not line up)."""
        with self._lock:
            leading, retry_in, failed = self._lease is not None, self._retry_in, self._failed
        if failed:
            wait = self.lease_seconds * RETRY_FRACTION * self._rng.uniform(1 - RENEW_JITTER, 1 + RENEW_JITTER)
        elif leading:
            wait = self.renew_seconds * self._rng.uniform(1 - RENEW_JITTER, 1 + RENEW_JITTER)
        else:
            wait = retry_in + self._rng.uniform(0.01, RENEW_JITTER) * self.lease_seconds
        if wait > self.longest_wait * 0.8:
            wait = min(wait, self.longest_wait * self._rng.uniform(0.8, 1.0))
        return wait

    def is_leader(self) -> bool:
        return self.current() is not None

    def current(self) -> LeaderLease | None:
        """The lease this process holds now by its own reckoning, or None."""
        now = self._monotonic()
        with self._lock:
            return self._lease if now < self._until else None

    def token(self) -> LeaderLease:
        """The token a maintenance write is fenced with; LeadershipLost when this process does
        not lead (so a duty stops before writing anything)."""
        lease = self.current()
        if lease is None:
            raise LeadershipLost(self.name, self.owner, 0)
        return lease

    def lost(self, error: LeadershipLost) -> None:
        """A write was refused (the store found another term): stop leading until ``run_once``
        takes the leadership again."""
        with self._lock:
            lease = self._lease
            if lease is None or lease.term != error.term:
                return  # already forgotten, or a refusal of an older term: the lease held now stays
            self._lease, self._until = None, 0.0
        self._log_lost(lease, "a write found another term")

    def resign(self) -> None:
        """Give the leadership up now (a graceful shutdown): the lease ends now, so the next
        candidate to ask takes it, not only one asking after its expiry. A store error leaves
        the lease to run out."""
        with self._lock:
            lease, self._lease, self._until = self._lease, None, 0.0
        if lease is None:
            return
        try:
            resigned = self.store.resign_leadership(lease)
        except StoreUnavailable as exc:
            logger.warning(
                "leadership.resign_failed", extra={"jobq_fields": {**self._fields(lease), "error": str(exc)}}
            )
            return
        if resigned:
            logger.info("leadership.resigned", extra={"jobq_fields": self._fields(lease)})

    def _lapse_if_due(self, started: float) -> None:
        with self._lock:
            lapsed = self._lease if self._lease is not None and started >= self._until else None
            if lapsed is not None:
                self._lease = None
        if lapsed is not None:
            self._log_lost(lapsed, "its lease ran out before it could be renewed")

    def _log_lost(self, lease: LeaderLease, why: str) -> None:
        logger.warning("leadership.lost", extra={"jobq_fields": {**self._fields(lease), "why": why}})

    @staticmethod
    def _fields(lease: LeaderLease) -> dict[str, object]:
        return {"leadership": lease.name, "owner": lease.owner, "term": lease.term}
