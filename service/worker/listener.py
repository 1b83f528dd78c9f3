"""The worker's wake-ups: LISTEN on ``JOBS_QUEUED`` (PostgreSQL), on a connection of its own.

A notification naming one of the worker's queues (or ``*``: a reconnect, anything may
have changed) is handed to ``woken``; the claim loop decides what to do with it
(:mod:`service.worker.claimer`). A wake-up is only a hint: notifications sent while the
connection was down are lost, so after each (re)connect the worker is woken once, and
the claim loop polls besides.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from service.store.base import JOBS_QUEUED, Listener, Store
from service.worker.backoff import Backoff
from service.worker.logs import log_event


class WakeupListener:
    def __init__(self, store: Store, worker_id: str, queues: Sequence[str], woken: Callable[[], None]) -> None:
        self.store = store
        self.worker_id = worker_id
        self.queues = set(queues)
        self._woken = woken
        self._lock = threading.Lock()
        self._listener: Listener | None = None
        self._closed = False

    def run(self, halt: threading.Event) -> None:
        """Listen (reconnecting with backoff) until ``halt`` is set."""
        backoff = Backoff(cap=10.0)
        while not halt.is_set():
            try:
                listener = self.store.listen([JOBS_QUEUED])
            except Exception as exc:
                log_event("worker.listen_error", logging.WARNING, worker=self.worker_id, error=str(exc))
                halt.wait(backoff.next())
                continue
            with self._lock:
                if self._closed or halt.is_set():
                    listener.close()
                    return
                self._listener = listener
            backoff.reset()
            self._woken()  # jobs enqueued before LISTEN took effect notified no one: look once
            try:
                while not halt.is_set():
                    notes = listener.wait(1.0)
                    if any(concerns(n.payload, self.queues) for n in notes):
                        self._woken()
            except Exception as exc:
                log_event("worker.listen_error", logging.WARNING, worker=self.worker_id, error=str(exc))
                halt.wait(backoff.next())
            finally:
                listener.close()

    def close(self) -> None:
        """Stop listening, without waiting: close() may wait for a reconnect attempt in progress,
        and must never hold up the worker's exit."""
        with self._lock:
            self._closed = True
            listener, self._listener = self._listener, None
        if listener is not None:
            threading.Thread(target=listener.close, name="jobq-listener-close", daemon=True).start()


def concerns(payload: str, queues: set[str]) -> bool:
    """A wake-up for us: one of our queues got jobs, or "*" (anything may have changed)."""
    if payload == "*" or not payload:
        return True
    return not queues.isdisjoint(payload.split(","))
