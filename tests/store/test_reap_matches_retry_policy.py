"""The retry budget has one meaning: the reaper's outcome for an expired lease is what
``RetryPolicy`` decides for the same attempt, on both stores.

The reaper is a worker failing on behalf of a dead one: an expired lease is a
retryable failure of the attempt it was on. ``RetryPolicy.decide(attempt,
max_attempts, retryable=True)`` says whether attempts remain; the store's reap
statement restates that as ``attempts < max_attempts`` in SQL (PostgreSQL: the CASEs
of one statement; SQLite: Python beside FAIL_JOB), and nothing else holds the two
equal. So every reap below is checked against the policy's decision for the job as it
was just before (its attempt, and its max_attempts as the claim left it, the kind's
override applied):

- cancellation requested: ``cancelled``, finished now, its error and due time kept
  (a cancelled job is not failed, so it takes no lease-expired error);
- ``Retry``: ``queued``, due exactly ``delays[attempt - 1]`` after now (the delays are
  the caller's: here the reaper's own, or a jittered draw within the policy's bounds,
  so an off-by-one in the lookup shows), its lease cleared, not finished;
- ``GiveUp``: ``failed``, finished now, due time kept;
- either of the last two: the error is ``lease_expired_error`` with how many times the
  lease expired, the attempt, the max_attempts and the worker (invariant 3);

and always: the attempts are not charged again (the claim charged them), the attempt's
row closes as ``lease_expired``, and the reap counts the job in the right bucket.

Each example is one job taken through up to five claim-expire-reap rounds, each claim
by a worker whose handler may override the kind's max_attempts, and a cancel request
on any round; so attempts run 1..5 against budgets 1..5 and every round is a case.
The clock is pinned: due times are exact (the stores keep milliseconds; the delays are
drawn in milliseconds).
"""

from __future__ import annotations

import itertools
import random
from datetime import datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.jobs import AttemptOutcome, JobState, JobStatus, NewJob, ReapResult, lease_expired_error
from service.payloads import MAX_ATTEMPTS_LIMIT
from service.retry import Retry, RetryPolicy
from service.store import Store
from tests.conftest import FakeClock

LEASE_SECONDS = 30.0
KIND = "resize"
MAX_BUDGET = 5
_queues = itertools.count()  # a queue per example: earlier examples' jobs are never claimed again


@st.composite
def reaper_delays(draw: st.DrawFn) -> tuple[RetryPolicy, list[float]]:
    """A policy and the delays a reap is given: its own (``delays_by_attempt``), or one
    jittered draw per attempt number within the policy's bounds, in whole milliseconds."""
    policy = RetryPolicy(
        base_seconds=draw(st.sampled_from([0.5, 2.0, 7.0])), cap_seconds=draw(st.sampled_from([5.0, 600.0]))
    )
    if draw(st.booleans()):
        return policy, policy.delays_by_attempt()
    rng = random.Random(draw(st.integers(0, 2**32)))
    return policy, [round(policy.delay(attempt, rng), 3) for attempt in range(1, MAX_ATTEMPTS_LIMIT + 1)]


def expected_after_expiry(
    policy: RetryPolicy, delays: list[float], before: JobStatus, now: datetime, expiries: int
) -> dict[str, Any]:
    """What the reap of ``before`` (running, its lease past) must leave, by the policy."""
    if before.cancel_requested:
        return {
            "state": JobState.CANCELLED,
            "error": before.error,
            "run_after": before.run_after,
            "finished_at": now,
            "lease_owner": before.lease_owner,
        }
    assert before.lease_owner is not None
    error = lease_expired_error(expiries, before.attempts, before.max_attempts, before.lease_owner)
    if isinstance(policy.decide(before.attempts, before.max_attempts, retryable=True), Retry):
        return {
            "state": JobState.QUEUED,
            "error": error,
            "run_after": now + timedelta(seconds=delays[before.attempts - 1]),
            "finished_at": None,
            "lease_owner": None,
        }
    return {
        "state": JobState.FAILED,
        "error": error,
        "run_after": before.run_after,
        "finished_at": now,
        "lease_owner": before.lease_owner,
    }


REAP_BUCKET = {JobState.QUEUED: "requeued", JobState.FAILED: "failed", JobState.CANCELLED: "cancelled"}


# One function-scoped store for all examples is deliberate: each example's job lives in
# a queue of its own and ends every example not running, so examples cannot meet.
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    own_max_attempts=st.none() | st.integers(1, MAX_BUDGET),
    rounds=st.lists(
        st.tuples(st.none() | st.integers(1, MAX_BUDGET), st.booleans()),  # (the kind's override, cancel?)
        min_size=1,
        max_size=MAX_BUDGET,
    ),
    policy_and_delays=reaper_delays(),
)
def test_every_reap_ends_the_job_as_the_retry_policy_decides(
    store: Store,
    clock: FakeClock,
    own_max_attempts: int | None,
    rounds: list[tuple[int | None, bool]],
    policy_and_delays: tuple[RetryPolicy, list[float]],
) -> None:
    policy, delays = policy_and_delays
    queue = f"reap{next(_queues)}"
    job = store.enqueue(NewJob(kind=KIND, queue=queue, max_attempts=own_max_attempts))
    for attempt, (kind_max_attempts, cancel) in enumerate(rounds, start=1):
        overrides = {KIND: kind_max_attempts} if kind_max_attempts is not None else None
        [claimed] = store.claim(f"worker-{attempt}", [queue], 1, LEASE_SECONDS, max_attempts=overrides)
        assert claimed.attempt == attempt
        if cancel:
            store.cancel(job.id)
        before = store.get(job.id)
        clock.advance(LEASE_SECONDS + 0.001)  # expiry is strict: just past the lease

        reaped = store.reap(delays)

        after = store.get(job.id)
        expected = expected_after_expiry(policy, delays, before, clock.now(), expiries=attempt)
        assert {name: getattr(after, name) for name in expected} == expected, (
            f"attempt {before.attempts} of {before.max_attempts}, cancel requested: {before.cancel_requested}"
        )
        assert (after.attempts, after.max_attempts) == (before.attempts, before.max_attempts)  # charged at claim
        assert after.lease_expires_at is None
        assert store.job_attempts(job.id)[-1].outcome == AttemptOutcome.LEASE_EXPIRED
        assert reaped == ReapResult(**{REAP_BUCKET[after.state]: 1})
        if after.state is not JobState.QUEUED:
            return
        clock.set(max(clock.now(), after.run_after) + timedelta(milliseconds=1))  # due again
