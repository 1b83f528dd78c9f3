"""Structured logs: one JSON object per line, one line per job event.

Job events (``event`` field): ``job.claimed``, ``job.succeeded``, ``job.retrying``,
``job.failed``, ``job.lease_lost``, ``job.cancelled``, ``job.released``, each with
``worker``, ``job_id``, ``kind``, ``queue``, ``attempt`` and (except claimed)
``duration_s``, the seconds the attempt ran in this worker. Worker events:
``worker.started``, ``worker.stopping``, ``worker.stopped``,
``store.unavailable``, ``store.available``, ``reaper.reaped``.

How lines are written. Two lines per job make logging a hot path (with the
logging module's per-record machinery, ``LogRecord``, the handler's lock and a
``write`` per line, they were half a no-op job's worker CPU). So:

- one encoder, :func:`encode_line`, makes every line, a job event's and a
  logging record's alike (:class:`JsonFormatter` calls it);
- under :func:`configure_logging` (the ``jobq worker`` process) events skip the
  logging module: the line is encoded in the caller's thread and handed to a
  :class:`LineWriter`, one thread that writes whatever lines are waiting with
  one ``write`` per batch. Records from other loggers (psycopg's, a handler's
  own) reach the same writer through a handler, so the lines keep one order;
- elsewhere (the library used in-process, tests) events go through the logging
  module as records, to whatever handlers the host program set up.

What a SIGKILL loses: the lines waiting in the writer, at most those of the
last :attr:`LineWriter.GATHER_SECONDS` (2 ms) plus one ``write`` — a job event
is logged after the database write it reports, so a line lost is never a job
lost. SIGTERM, SIGINT, ``sys.exit`` and a second signal's hard exit flush the
writer first (``logging.shutdown`` flushes every handler; the writer's is one).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from service.jobs import ClaimedJob
from service.logs import FIELDS_ATTR, JsonFormatter, encode_json, encode_line, timestamps

LOGGER_NAME = "jobq.worker"

logger = logging.getLogger(LOGGER_NAME)


class LineWriter:
    """One thread that writes waiting lines in batches: one ``write`` for all of them.

    The thread sleeps in ``get`` while nothing is logged; once a line arrives it
    waits ``GATHER_SECONDS`` for more, so a busy worker makes at most ~500 writes
    a second, whatever its rate of lines, and a line reaches the file within a
    few milliseconds.
    """

    GATHER_SECONDS = 0.002

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._lock = threading.Lock()  # one writer at a time: the thread, or a flush at exit
        self._thread = threading.Thread(target=self._run, name="jobq-log-writer", daemon=True)
        self._thread.start()

    def put(self, line: str) -> None:
        self._queue.put(line)

    def flush(self) -> None:
        """Write every waiting line now (at exit; from any thread)."""
        with self._lock:
            self._write(self._take([]))

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            with self._lock:
                time.sleep(self.GATHER_SECONDS)
                self._write(self._take([first]))

    def _take(self, lines: list[str]) -> list[str]:
        while True:
            try:
                lines.append(self._queue.get_nowait())
            except queue.Empty:
                return lines

    def _write(self, lines: list[str]) -> None:
        if not lines:
            return
        data = ("\n".join(lines) + "\n").encode("utf-8", "backslashreplace")
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError:
            pass  # stderr closed or full disk: a worker must not stop running jobs over its log


class _WriterHandler(logging.Handler):
    """Puts logging records (other loggers', or job events' with exc_info) through the writer."""

    def __init__(self, writer: LineWriter) -> None:
        super().__init__()
        self.writer = writer
        self.setFormatter(JsonFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.writer.put(self.format(record))
        except Exception:
            self.handleError(record)

    def flush(self) -> None:
        self.writer.flush()


_writer: LineWriter | None = None
JobObserver = Callable[[str, ClaimedJob, "float | None"], None]
_observer: JobObserver | None = None  # the worker's metrics (service.worker.metrics), when served


def observe_job_events(observer: JobObserver | None) -> None:
    """Call ``observer(event, job, duration)`` for every job event, whatever the log level (the
    worker's /metrics counts them: ``jobq worker --metrics-port``). None stops."""
    global _observer
    _observer = observer


"""Set by configure_logging: events go straight to it, not through the logging module."""


def log_event(event: str, level: int = logging.INFO, exc_info: bool = False, **fields: Any) -> None:
    if not logger.isEnabledFor(level):
        return
    writer = _writer
    if writer is not None:
        exc = "".join(traceback.format_exception(*sys.exc_info())).rstrip("\n") if exc_info else None
        writer.put(encode_line(time.time(), level, LOGGER_NAME, event, fields, exc))
        return
    # Without a writer: a record for the host program's handlers, built directly
    # (Logger.log would search the call stack for a source line no formatter shows).
    record = logger.makeRecord(
        LOGGER_NAME,
        level,
        "(jobq)",
        0,
        event,
        (),
        sys.exc_info() if exc_info else None,
        extra={FIELDS_ATTR: fields},
    )
    logger.handle(record)


def job_event(
    event: str,
    job: ClaimedJob,
    worker: str,
    *,
    duration: float | None = None,
    level: int = logging.INFO,
    **fields: Any,
) -> None:
    observer = _observer
    if observer is not None:
        observer(event, job, duration)
    if not logger.isEnabledFor(level):
        return
    writer = _writer
    if writer is not None:
        writer.put(_job_line(time.time(), level, event, job, worker, duration, fields))
        return
    values: dict[str, Any] = {
        "worker": worker,
        "job_id": str(job.id),
        "kind": job.kind,
        "queue": job.queue,
        "attempt": job.attempt,
    }
    if duration is not None:
        values["duration_s"] = round(duration, 3)
    values.update(fields)
    log_event(event, level, **values)


_quote = json.encoder.encode_basestring_ascii  # C; what the encoder itself uses
_heads: dict[tuple[int, str, str], str] = {}
_places: dict[tuple[str, str], str] = {}


def _job_line(
    created: float, level: int, event: str, job: ClaimedJob, worker: str, duration: float | None, fields: dict[str, Any]
) -> str:
    """encode_line's output for a job event, from cached pieces: the JSON encoder's generic
    walk of a ten-key dict was most of an event's cost. The pieces that repeat from job to
    job (level, event and worker; kind and queue) are encoded once each."""
    head = _heads.get((level, event, worker))
    if head is None:
        head = _heads.setdefault(
            (level, event, worker),
            encode_line(0, level, LOGGER_NAME, event, {"worker": worker})[
                len('{"ts": "1970-01-01T00:00:00.000+00:00", ') : -1
            ],
        )
    place = _places.get((job.kind, job.queue))
    if place is None:
        if len(_places) > 1000:  # kinds x queues is small; never let it grow without bound
            _places.clear()
        place = _places.setdefault((job.kind, job.queue), f'"kind": {_quote(job.kind)}, "queue": {_quote(job.queue)}')
    line = f'{{"ts": "{timestamps.format(created)}", {head}, "job_id": "{job.id}", {place}, "attempt": {job.attempt:d}'
    if duration is not None:
        line += f', "duration_s": {round(duration, 3)!r}'
    if fields:
        line += ", " + encode_json(fields)[1:-1]
    return line + "}"


def configure_logging(level: str = "INFO") -> None:
    """JSON lines on stderr for the ``jobq worker`` process, through one writer thread."""
    global _writer
    sys.stderr.flush()  # anything printed before goes first
    if _writer is None:
        _writer = LineWriter(sys.stderr.fileno())
    handler = _WriterHandler(_writer)
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # No line shows the thread or process names, and every record would look them up.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging.getLogger("psycopg").setLevel(logging.ERROR)  # the pool's reconnect chatter; we log outages ourselves
    logging.getLogger("alembic").setLevel(logging.WARNING)  # the start-up schema check's plugin set-up lines
