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


def log_event(event: str, level: int = logging.INFO, exc_info: bool = False, **fields: Any) -> None:
    logger.log(level, event, extra={FIELDS_ATTR: fields}, exc_info=exc_info)


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
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        line.update(getattr(record, FIELDS_ATTR, {}))
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(level: str = "INFO") -> None:
    """JSON lines on stderr for the ``jobq worker`` process."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("psycopg").setLevel(logging.ERROR)  # the pool's reconnect chatter; we log outages ourselves
