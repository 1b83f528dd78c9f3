"""Whether the database answers, as the worker's threads see it: one log line per outage."""

from __future__ import annotations

import logging
import threading
import time

from service.errors import StoreUnavailable
from service.worker.logs import log_event


class StoreHealth:
    """Logs ``store.unavailable`` when an outage starts and ``store.available`` when it ends."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self.outages = 0

    @property
    def available(self) -> bool:
        return self._down_since is None

    def failed(self, exc: StoreUnavailable, during: str) -> None:
        with self._lock:
            if self._down_since is not None:
                return
            self._down_since = time.monotonic()
            self.outages += 1
        log_event("store.unavailable", logging.WARNING, worker=self.worker_id, during=during, error=str(exc))

    def ok(self) -> None:
        if self._down_since is None:  # the common case: no lock
            return
        with self._lock:
            if self._down_since is None:
                return
            down_for = time.monotonic() - self._down_since
            self._down_since = None
        log_event("store.available", worker=self.worker_id, down_s=round(down_for, 3))
