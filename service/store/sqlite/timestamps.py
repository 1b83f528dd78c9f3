"""Timestamps as SQLite holds them: UTC text ``YYYY-MM-DD HH:MM:SS.SSS``, which sorts as it compares."""

from __future__ import annotations

from datetime import UTC, datetime

from service.errors import InvalidInput


def to_text(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise InvalidInput("timestamps must carry a time zone")
    try:
        utc = moment.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:59:59-01:00, which is in year 10000 in UTC
        raise InvalidInput(f"{moment.isoformat()} is past the calendar's end (or before its start) in UTC") from None
    return utc.strftime("%Y-%m-%d %H:%M:%S.") + f"{utc.microsecond // 1000:03d}"


def from_text(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)
