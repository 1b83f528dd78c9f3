"""The room left in a scope (service.limits.ScopeUsage): the one Python home of the rule
the SQLite claim and explain use (PostgreSQL's claim says it in SQL: the
room(c) fragment, held to the same answers by the store's limit tests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from service.limits import ScopeUsage, rate_window

NOW = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)


def usage(running: int = 0, concurrency: int | None = None, rate: int | None = None, starts: int = 0,
          window: datetime | None = None) -> ScopeUsage:  # fmt: skip
    per = None if rate is None else 60.0
    return ScopeUsage("kind:a", running, concurrency, rate, per, window, starts)


def test_no_limit_holds_nothing_back() -> None:
    assert usage(running=5).room(NOW) is None
    assert not usage(running=5).is_full()
    assert usage(running=5).next_start_at(NOW) is None


def test_a_concurrency_limit_leaves_its_free_slots_and_is_full_at_the_limit() -> None:
    assert usage(running=1, concurrency=3).room(NOW) == 2
    assert not usage(running=2, concurrency=3).is_full()
    assert usage(running=3, concurrency=3).is_full() and usage(running=3, concurrency=3).room(NOW) == 0
    assert usage(running=4, concurrency=3).room(NOW) == -1  # lowered under running jobs: still full


def test_a_rate_limit_counts_only_the_starts_of_the_current_window() -> None:
    window = rate_window(NOW, 60.0)
    assert usage(rate=5, starts=3, window=window).room(NOW) == 2
    assert usage(rate=5, starts=5, window=window - timedelta(minutes=1)).room(NOW) == 5  # an old window
    spent = usage(rate=5, starts=5, window=window)
    assert spent.room(NOW) == 0 and not spent.is_full()  # rate-limited, not full
    assert spent.next_start_at(NOW) == window + timedelta(minutes=1)
    assert usage(rate=5, starts=4, window=window).next_start_at(NOW) is None


def test_with_both_limits_the_tighter_one_decides() -> None:
    window = rate_window(NOW, 60.0)
    assert usage(running=1, concurrency=10, rate=5, starts=4, window=window).room(NOW) == 1
    assert usage(running=9, concurrency=10, rate=5, starts=0, window=window).room(NOW) == 1
