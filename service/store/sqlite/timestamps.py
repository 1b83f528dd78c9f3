"""Timestamps as SQLite holds them: UTC text ``YYYY-MM-DD HH:MM:SS.SSS``, which sorts as it compares."""

from __future__ import annotations

from datetime import UTC, datetime

from service.errors import InvalidInput


def to_text(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise InvalidInput("timestamps must carry a time zone")
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%d %H:%M:%S.") + f"{utc.microsecond // 1000:03d}"


def from_text(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)
