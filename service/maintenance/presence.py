"""A worker's presence: its one periodic statement, the check-in (``Store.check_in``).

An idle worker used to spend a transaction on each of its upkeep's questions: the touch of
its workers row every 10 s, the leadership's acquire (a candidate asking when the lease
ends), and, on the leader, the schedules read twice a second (issue 24: 0.71 transactions/s
per idle worker in a fleet of 20). The check-in asks them all in one statement, and the
leadership's duty (service.maintenance.leadership) is its clock: the leader checks in at
each renewal (a third of its lease), a candidate when the holder's lease would end (when a
takeover may be due; at the latest every ``touch_seconds``, so it stays alive in the
workers table). What it brings back paces the rest:

- the leadership's answer, to :class:`~service.maintenance.leadership.Leadership`, as
  ``acquire_leadership``'s;
- ``peers``: the live workers sharing a queue with this one that have a slot free, by whom
  the claim loop spreads an idle worker's polls (service.worker.claimer.IdlePolls);
- ``next_schedule_in``: when the next schedule is due, to the scheduler
  (:meth:`~service.maintenance.scheduler.Scheduler.expect`), so the leader reads the
  schedules only then;
- ``jobs_running``: whether any job runs; the leader's reaper rests while none does
  (service.maintenance.duties).
"""

from __future__ import annotations

from collections.abc import Callable

from service.jobs import WORKER_ALIVE_SECONDS
from service.store.base import MAINTENANCE, LeaderLease, Store


class Presence:
    """One worker's check-in, and what the last one learnt. ``check_in`` is called from the
    maintenance thread; ``peers`` may be read from any (an int, replaced whole)."""

    def __init__(
        self,
        store: Store,
        worker_id: str,
        lease_seconds: float,
        *,
        name: str = MAINTENANCE,
        alive_seconds: float = WORKER_ALIVE_SECONDS,
        schedule_due_in: Callable[[float | None], None] = lambda seconds: None,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.name = name
        self.alive_seconds = alive_seconds
        self.schedule_due_in = schedule_due_in
        self.peers = 1  # until the first check-in: this worker alone
        self.jobs_running = True  # until the first check-in: the reaper does not rest

    def check_in(self) -> tuple[LeaderLease | None, float]:
        """Check in; the leadership's answer (as ``Store.acquire_leadership``'s)."""
        answer = self.store.check_in(self.worker_id, self.name, self.lease_seconds, self.alive_seconds)
        self.peers = answer.peers
        self.jobs_running = answer.jobs_running
        self.schedule_due_in(answer.next_schedule_in)
        return answer.lease, answer.free_in
