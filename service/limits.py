"""Fleet-wide limits and fair shares: the domain rules, no I/O.

A *scope* names a set of jobs: ``tenant:NAME``, ``kind:NAME``, ``queue:NAME``,
``key:NAME`` (the jobs whose ``concurrency_key`` is NAME), and ``tenant:*``, the
default of every tenant that has no limit of its own (each tenant gets that
limit on its own; it is not one pool shared by all tenants).

A scope's :class:`Limit` may carry a concurrency limit (at most N of its jobs
run at once), a rate limit (at most N starts per period) and, for tenants, a
weight (its share of free slots against the other tenants with due jobs).
The stores enforce them inside the claim statement; this module only checks
and words them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from service.errors import InvalidInput

SCOPE_KINDS = ("tenant", "kind", "queue", "key")
DEFAULT_TENANT_SCOPE = "tenant:*"
MAX_SCOPE_LENGTH = 200
MAX_CONCURRENCY = 1_000_000
MAX_RATE = 1_000_000
MAX_WEIGHT = 1_000.0

RATE_PERIODS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3_600.0,
    "hour": 3_600.0,
    "d": 86_400.0,
    "day": 86_400.0,
}
RATE_PATTERN = r"^[1-9][0-9]{0,6}/(s|sec|second|m|min|minute|h|hour|d|day)$"
_RATE = re.compile(RATE_PATTERN)
_PERIOD_NAMES = {1.0: "s", 60.0: "min", 3_600.0: "h", 86_400.0: "day"}


@dataclass(frozen=True)
class Limit:
    """What an operator set on one scope. ``None``: no limit of that sort."""

    scope: str
    concurrency: int | None = None
    rate: int | None = None  # starts ...
    per_seconds: float | None = None  # ... per this many seconds
    weight: float | None = None  # tenants only; None: inherited from tenant:*, else 1

    def __post_init__(self) -> None:
        check_scope(self.scope)
        if self.concurrency is not None and not (
            isinstance(self.concurrency, int)
            and not isinstance(self.concurrency, bool)
            and 0 <= self.concurrency <= MAX_CONCURRENCY
        ):
            raise InvalidInput(f"concurrency must be a whole number from 0 to {MAX_CONCURRENCY}")
        if (self.rate is None) != (self.per_seconds is None):
            raise InvalidInput("a rate limit needs both a number of starts and a period")
        if self.rate is not None and not (
            isinstance(self.rate, int) and not isinstance(self.rate, bool) and 1 <= self.rate <= MAX_RATE
        ):
            raise InvalidInput(f"a rate must allow from 1 to {MAX_RATE} starts per period")
        if self.per_seconds is not None and self.per_seconds not in RATE_PERIODS.values():
            raise InvalidInput("a rate's period is one second, minute, hour or day")
        if self.weight is not None:
            if (
                isinstance(self.weight, bool)
                or not isinstance(self.weight, int | float)
                or not (math.isfinite(self.weight) and 0 < self.weight <= MAX_WEIGHT)
            ):
                raise InvalidInput(f"weight must be a number above 0 and at most {MAX_WEIGHT:g}")
            if not self.scope.startswith("tenant:"):
                raise InvalidInput("a weight shares slots among tenants: only tenant scopes take one")
        if self.concurrency is None and self.rate is None and self.weight is None:
            raise InvalidInput("a limit needs a concurrency, a rate or a weight")

    @property
    def rate_text(self) -> str | None:
        return format_rate(self.rate, self.per_seconds)


@dataclass(frozen=True)
class ScopeUsage:
    """A limited scope as it is now (a scope_counters row): the limit in force and the jobs
    of it running, exact. A tenant under tenant:* has one of its own, ``tenant:NAME``.
    ``window_start``/``window_starts``: the rate window now counted and the starts in it."""

    scope: str
    running: int
    concurrency: int | None
    rate: int | None
    per_seconds: float | None
    window_start: datetime | None
    window_starts: int

    # The room rule, in Python: the SQLite claim and "why isn't my job running?" use it.
    # PostgreSQL's claim computes the same in SQL: the room(c) fragment of
    # service/store/postgres/sql/limits.sql.
    def room(self, now: datetime) -> int | None:
        """How many more jobs of the scope may start now (None: no limit holds it back)."""
        rooms = [room for room in (self.running_room(), self.starts_room(now)) if room is not None]
        return min(rooms) if rooms else None

    def running_room(self) -> int | None:
        """How many more of its jobs the concurrency limit lets run (None: no such limit)."""
        return None if self.concurrency is None else self.concurrency - self.running

    def starts_room(self, now: datetime) -> int | None:
        """How many more starts the rate limit allows in the window ``now`` falls in (None:
        no rate limit). A window the counter has not counted in yet has all its starts."""
        if self.rate is None or self.per_seconds is None:
            return None
        counted = self.window_starts if self.window_start == rate_window(now, self.per_seconds) else 0
        return self.rate - counted

    def is_full(self) -> bool:
        """Whether its concurrency limit lets no more of its jobs run."""
        room = self.running_room()
        return room is not None and room <= 0

    def next_start_at(self, now: datetime) -> datetime | None:
        """When the rate limit allows a start again, if it allows none now."""
        room = self.starts_room(now)
        if room is None or room > 0 or self.per_seconds is None:
            return None
        return rate_window(now, self.per_seconds) + timedelta(seconds=self.per_seconds)


def format_rate(rate: int | None, per_seconds: float | None) -> str | None:
    """``20/s``, ``60/min``: a rate as ``jobq limits set --rate`` takes it (None: no rate)."""
    if rate is None or per_seconds is None:
        return None
    return f"{rate}/{_PERIOD_NAMES.get(per_seconds, f'{per_seconds:g}s')}"


def check_scope(scope: str) -> str:
    """The scope as given, or InvalidInput saying what a scope looks like."""
    if not isinstance(scope, str):
        raise InvalidInput("a scope is text like tenant:acme")
    kind, sep, name = scope.partition(":")
    if not sep or kind not in SCOPE_KINDS or not name.strip() or name != name.strip():
        raise InvalidInput(f"a scope is tenant:NAME, tenant:*, kind:NAME, queue:NAME or key:NAME, not {scope!r}")
    if len(scope) > MAX_SCOPE_LENGTH:
        raise InvalidInput(f"a scope is at most {MAX_SCOPE_LENGTH} characters")
    if name == "*" and kind != "tenant":
        raise InvalidInput("only tenant:* names a default (each tenant gets it on its own)")
    return scope


def parse_rate(text: str) -> tuple[int, float]:
    """``"20/s"`` -> (20, 1.0), ``"60/min"`` -> (60, 60.0). Raises InvalidInput."""
    if not isinstance(text, str) or _RATE.fullmatch(text.strip()) is None:
        raise InvalidInput(f"a rate is N/PERIOD with a period of s, min, h or day (e.g. 5/s, 60/min), not {text!r}")
    count, period = text.strip().split("/")
    return int(count), RATE_PERIODS[period]


def job_scopes(tenant: str, kind: str, queue: str, concurrency_key: str | None) -> list[str]:
    """The scopes a job belongs to, besides ``tenant:*`` (which applies through ``tenant:NAME``).
    The stores' SQL says the same once, in the job_scopes(x) fragment of
    service/store/sql/scopes.sql."""
    scopes = [f"tenant:{tenant}", f"kind:{kind}", f"queue:{queue}"]
    if concurrency_key is not None:
        scopes.append(f"key:{concurrency_key}")
    return scopes


def tenant_of(scope: str) -> str | None:
    """The tenant a ``tenant:NAME`` scope names (None for other scopes and ``tenant:*``)."""
    kind, _, name = scope.partition(":")
    return name if kind == "tenant" and name != "*" else None


def rate_window(now: datetime, per_seconds: float) -> datetime:
    """The rate window ``now`` falls in: windows of ``per_seconds`` aligned to the Unix epoch
    (each second, minute, hour or day of UTC), as the PostgreSQL claim computes them."""
    start = math.floor(now.timestamp() / per_seconds) * per_seconds
    return datetime.fromtimestamp(start, tz=UTC)
