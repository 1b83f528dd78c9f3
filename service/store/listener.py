"""The stand-in for LISTEN where no notification comes (SQLite, or PostgreSQL with
JOBQ_NOTIFY=false): waiting callers poll."""

from __future__ import annotations

import threading

from service.jobs import Notification


class SilentListener:
    """No notifications: ``wait`` only sleeps, so callers fall back to polling."""

    def __init__(self) -> None:
        self._closed = threading.Event()

    def wait(self, timeout: float) -> list[Notification]:
        self._closed.wait(timeout)
        return []

    def close(self) -> None:
        self._closed.set()
