"""LISTEN/NOTIFY wake-ups on a dedicated connection."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from service.jobs import Notification
from service.store.postgres.connection import JobqConnection, connection_defaults


class PostgresListener:
    """LISTEN on a dedicated connection (never a pooled one: LISTEN belongs to a session).

    Waits in short slices so that ``close`` from another thread is noticed quickly.
    When the connection drops it reconnects with jittered backoff, LISTENs again,
    and answers ``payload="*"`` on every channel: notifications sent while it was
    away are lost, so the caller must look for itself.
    """

    SLICE_SECONDS = 0.25

    def __init__(self, database_url: str, channels: Sequence[str]) -> None:
        self._url = database_url
        self._channels = list(channels)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._failures = 0
        try:
            self._connect()
        except psycopg.Error:
            self._conn = None  # the first wait() retries and then answers "*"

    def _connect(self) -> None:
        conn = JobqConnection.connect(self._url, autocommit=True, **connection_defaults(self._url))
        for channel in self._channels:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        self._conn = conn
        self._failures = 0

    def wait(self, timeout: float) -> list[Notification]:
        deadline = time.monotonic() + timeout
        while not self._closed.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            with self._lock:
                if self._closed.is_set():
                    return []
                if self._conn is None:
                    if self._reconnect():
                        return [Notification(channel, "*") for channel in self._channels]
                    pause = min(remaining, random.uniform(0, min(5.0, 0.1 * 2**self._failures)))
                else:
                    try:
                        received = self._receive(min(remaining, self.SLICE_SECONDS))
                    except psycopg.Error:
                        self._drop()
                        continue
                    if received:
                        return received
                    continue
            self._closed.wait(pause)
        return []

    def _receive(self, timeout: float) -> list[Notification]:
        assert self._conn is not None
        got = [Notification(n.channel, n.payload) for n in self._conn.notifies(timeout=timeout, stop_after=1)]
        if got:  # take whatever else already arrived, without waiting
            got += [Notification(n.channel, n.payload) for n in self._conn.notifies(timeout=0)]
        return got

    def _reconnect(self) -> bool:
        try:
            self._connect()
            return True
        except psycopg.Error:
            self._failures += 1
            return False

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._drop()
