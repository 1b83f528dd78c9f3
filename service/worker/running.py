"""A job this worker holds, as the claim loop, the job's thread and the lease keeper share it."""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field

from service.jobs import JSON, ClaimedJob, Completion
from service.worker.context import JobContext
from service.worker.registry import HandlerSpec


class Phase(enum.Enum):
    RUNNING = "running"  # the handler runs; heartbeats renew the lease
    FINISHING = "finishing"  # one party is writing the outcome; heartbeats go on until it lands
    DONE = "done"  # the outcome is written (or was refused): nothing more to do here
    ABANDONED = "abandoned"  # the lease is gone: no more writes; the handler's result will be dropped


@dataclass(eq=False)
class RunningJob:
    job: ClaimedJob
    spec: HandlerSpec
    ctx: JobContext
    lease_seconds: float
    started: float  # monotonic seconds, when the claim was sent
    handed: float  # monotonic seconds, when the job was given to its thread (the finisher's pace counts from it)
    last_renewed: float  # monotonic seconds, when the last successful renewal (or the claim) was sent
    stop_requested_at: float | None = None
    phase: Phase = Phase.RUNNING
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    writing: threading.Lock = field(default_factory=threading.Lock, repr=False)
    """Held while a write carries the handler's pending progress and item outcomes (a heartbeat,
    the completion): one at a time, so no outcome is written twice, and no count added twice."""

    @property
    def heartbeat_every(self) -> float:
        """Renew at a third of the lease: two renewals can fail before it expires."""
        return self.lease_seconds / 3

    def begin_finish(self) -> bool:
        """Take the right to write the outcome. Exactly one caller ever gets True."""
        return self._move(Phase.RUNNING, Phase.FINISHING)

    def abandon(self) -> bool:
        """The lease is gone while the handler runs; True if it was running."""
        return self._move(Phase.RUNNING, Phase.ABANDONED)

    def completion(self, result: JSON) -> Completion:
        """The success to write: the result, and the progress and item outcomes the handler reported
        after the last heartbeat. Call it holding ``writing``."""
        pending = self.ctx.pending()
        children = self.ctx.children()
        if pending is None:
            return Completion(self.job.lease, result, children=children)
        return Completion(self.job.lease, result, pending.done, pending.total, pending.items, children)

    def finished(self) -> None:
        with self._lock:
            if self.phase is Phase.FINISHING:
                self.phase = Phase.DONE

    @property
    def renewing(self) -> bool:
        return self.phase in (Phase.RUNNING, Phase.FINISHING)

    def _move(self, source: Phase, target: Phase) -> bool:
        with self._lock:
            if self.phase is not source:
                return False
            self.phase = target
            return True
