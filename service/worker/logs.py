"""Structured logs: one JSON object per line, one line per job event.

Job events (``event`` field): ``job.claimed``, ``job.succeeded``, ``job.retrying``,
``job.failed``, ``job.lease_lost``, ``job.cancelled``, ``job.released``, each with
``worker``, ``job_id``, ``kind``, ``queue``, ``attempt`` and (except claimed)
``duration_s``, the seconds the attempt ran in this worker. Worker events:
``worker.started``, ``worker.stopping``, ``worker.stopped``,
``store.unavailable``, ``store.available``, ``reaper.reaped``.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from service.jobs import ClaimedJob

LOGGER_NAME = "jobq.worker"
FIELDS_ATTR = "jobq_fields"

logger = logging.getLogger(LOGGER_NAME)

# Built once: json.dumps(..., default=str) builds a new encoder for every line.
_encode_line = json.JSONEncoder(default=str).encode


def log_event(event: str, level: int = logging.INFO, exc_info: bool = False, **fields: Any) -> None:
    # Two log lines per job (claimed, succeeded) are a hot path: build the record directly,
    # skipping Logger.log's search of the call stack for a source line no formatter shows.
    if not logger.isEnabledFor(level):
        return
    record = logger.makeRecord(
        LOGGER_NAME, level, "(jobq)", 0, event, (), sys.exc_info() if exc_info else None,
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


class JsonFormatter(logging.Formatter):
    _second = -1
    _stamp = ""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": self._timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        line.update(getattr(record, FIELDS_ATTR, {}))
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return _encode_line(line)

    def _timestamp(self, created: float) -> str:
        """``2030-01-01T12:00:00.123+00:00``; the date and time part is formatted once per second."""
        second = int(created)
        micros = round((created - second) * 1_000_000)  # as datetime.fromtimestamp rounds
        if micros >= 1_000_000:
            second, micros = second + 1, micros - 1_000_000
        if second != self._second:
            self._stamp = datetime.fromtimestamp(second, UTC).isoformat()
            self._second = second
        return f"{self._stamp[:19]}.{micros // 1000:03d}{self._stamp[19:]}"


def configure_logging(level: str = "INFO") -> None:
    """JSON lines on stderr for the ``jobq worker`` process."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # No line shows the thread or process names, and every record would look them up:
    # two records per job make that a measurable share of a busy worker's CPU.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging.getLogger("psycopg").setLevel(logging.ERROR)  # the pool's reconnect chatter; we log outages ourselves
