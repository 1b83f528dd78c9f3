"""The retry decision (service.retry): the one place that says whether and when a failed attempt runs again."""

from __future__ import annotations

import random

from service.payloads import MAX_ATTEMPTS_LIMIT
from service.retry import GiveUp, Retry, RetryPolicy


def test_a_retryable_failure_with_attempts_left_retries_within_the_backoff_ceiling():
    policy = RetryPolicy(base_seconds=2, cap_seconds=600)
    for attempt in (1, 2, 5):
        decision = policy.decide(attempt, 10, retryable=True, rng=random.Random(attempt))
        assert isinstance(decision, Retry)
        assert 0 <= decision.delay_seconds <= 2 * 2 ** (attempt - 1)


def test_the_last_attempt_and_a_permanent_error_give_up():
    policy = RetryPolicy()
    assert policy.decide(3, 3, retryable=True) == GiveUp()
    assert policy.decide(1, 3, retryable=False) == GiveUp()


def test_the_ceiling_stops_at_the_cap():
    assert RetryPolicy(base_seconds=2, cap_seconds=10).ceiling(30) == 10


def test_an_expired_lease_is_due_again_at_once_whatever_the_attempt():
    """The lease already made the job wait (see delays_by_attempt); backoff would only add to it."""
    assert RetryPolicy(base_seconds=1, cap_seconds=50).delays_by_attempt() == [0.0] * MAX_ATTEMPTS_LIMIT


def test_delays_are_jittered_so_failures_together_do_not_retry_together():
    policy = RetryPolicy(base_seconds=100, cap_seconds=100)
    assert len({policy.delay(1) for _ in range(20)}) > 1
