"""SQLite's stand-in for LISTEN: it has no notifications, so callers poll."""

from __future__ import annotations

import threading

from service.jobs import Notification


class SilentListener:
    """SQLite has no notifications: ``wait`` only sleeps, so callers fall back to polling."""

    def __init__(self) -> None:
        self._closed = threading.Event()

    def wait(self, timeout: float) -> list[Notification]:
        self._closed.wait(timeout)
        return []

    def close(self) -> None:
        self._closed.set()
