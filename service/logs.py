"""JSON log lines, the one format of every jobq process: the worker, ``jobq serve`` and ``jobq dev``.

One line per record: ``ts``, ``level``, ``logger``, ``event``, then the record's
fields, then ``exc`` (a traceback) if there is one. A record of another library
carries its message as ``event``; uvicorn's access records get fields of their
own (``http.request`` with client, method, path, http_version, status), so a
request's line reads like a job event's.

The worker writes through a writer thread of its own (:mod:`service.worker.logs`)
with this encoder; :func:`uvicorn_log_config` configures the API processes.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

FIELDS_ATTR = "jobq_fields"
"""A record's ``extra`` key for the fields of its line."""

ACCESS_LOGGER = "uvicorn.access"
LOG_FORMATS = ("json", "text")

# Built once: json.dumps(..., default=str) builds a new encoder for every line.
encode_json = json.JSONEncoder(default=str).encode
_LEVEL_NAMES = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warning",
    logging.ERROR: "error",
    logging.CRITICAL: "critical",
}


class _Timestamps:
    """``2030-01-01T12:00:00.123+00:00``; the date and time part is formatted once per second."""

    def __init__(self) -> None:
        self._cached = (-1, "")  # (second, its stamp): one tuple, so threads never see a torn pair

    def format(self, created: float) -> str:
        second = int(created)
        micros = round((created - second) * 1_000_000)  # as datetime.fromtimestamp rounds
        if micros >= 1_000_000:
            second, micros = second + 1, micros - 1_000_000
        cached_second, stamp = self._cached
        if second != cached_second:
            stamp = datetime.fromtimestamp(second, UTC).isoformat()
            self._cached = (second, stamp)
        return f"{stamp[:19]}.{micros // 1000:03d}{stamp[19:]}"


timestamps = _Timestamps()


def encode_line(
    created: float, level: int, name: str, event: str, fields: dict[str, Any], exc: str | None = None
) -> str:
    """The one encoder of every JSON log line: ts, level, logger, event, the fields, exc."""
    line: dict[str, Any] = {
        "ts": timestamps.format(created),
        "level": _LEVEL_NAMES.get(level) or logging.getLevelName(level).lower(),
        "logger": name,
        "event": event,
    }
    line.update(fields)
    if exc:
        line["exc"] = exc
    return encode_json(line)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else None
        event, fields = _access_line(record) or (record.getMessage(), getattr(record, FIELDS_ATTR, {}))
        return encode_line(record.created, record.levelno, record.name, event, fields, exc)


def _access_line(record: logging.LogRecord) -> tuple[str, dict[str, Any]] | None:
    """uvicorn's access record (``'%s - "%s %s HTTP/%s" %d'`` and its five values) as fields."""
    if record.name != ACCESS_LOGGER or not isinstance(record.args, tuple) or len(record.args) != 5:
        return None
    client, method, path, http_version, status = record.args
    return "http.request", {
        "client": client,
        "method": method,
        "path": path,
        "http_version": http_version,
        "status": status,
    }


def uvicorn_log_config(log_format: str, level: str) -> dict[str, Any] | None:
    """uvicorn's ``log_config`` for ``jobq serve`` and ``jobq dev``: JSON lines on stderr for uvicorn's
    loggers, its access log and the API's own (``jobq.api``); None for ``text``, uvicorn's own format."""
    if log_format == "text":
        return None
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {"stderr": handler},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
            ACCESS_LOGGER: {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
        },
        "root": {"handlers": ["stderr"], "level": level.upper()},
    }
