"""The handler's item API, without a database: outcomes recorded, the limit, resuming."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from service.errors import InvalidInput, TooManyItemFailures
from service.items import check_limit, exceeded
from service.jobs import ClaimedJob, ItemState, JobItem, Lease
from service.worker.context import JobContext, JobStopped, StopReason


def claimed(checkpoint: Any = None) -> ClaimedJob:
    return ClaimedJob(
        lease=Lease(uuid.uuid4(), "w", 1, 1),
        kind="k",
        queue="default",
        tenant="default",
        payload={},
        checkpoint=checkpoint,
        done=0,
        total=None,
        max_attempts=3,
        lease_expires_at=datetime.now(UTC),
    )


def outcomes(ctx: JobContext) -> list[tuple[int, str, Any, str | None]]:
    pending = ctx.pending()
    assert pending is not None
    return [(o.index, o.state.value, o.result, o.error.splitlines()[0] if o.error else None) for o in pending.items]


def stored(index: int, state: ItemState, result: Any = None) -> JobItem:
    return JobItem(index, state, result, "E: x" if state is ItemState.FAILED else None, 1, datetime.now(UTC))


def test_map_records_each_item_and_goes_on_after_a_failure() -> None:
    ctx = JobContext(claimed(), "w")

    def work(n: int) -> int:
        if n == 2:
            raise ValueError(f"bad {n}")
        return n * 10

    results = ctx.map([0, 1, 2, 3], work)

    assert results == [0, 10, 30]
    assert outcomes(ctx) == [
        (0, "ok", 0, None),
        (1, "ok", 10, None),
        (2, "failed", None, "ValueError: bad 2"),
        (3, "ok", 30, None),
    ]
    assert (ctx.items_ok, ctx.items_failed, ctx.done, ctx.total) == (3, 1, 4, 4)
    assert "Traceback" in (ctx.pending().items[2].error or "")  # type: ignore[union-attr]


def test_the_item_block_catches_records_and_the_loop_goes_on() -> None:
    ctx = JobContext(claimed(), "w")
    for index, text in ctx.enumerate(["a", "bb", "ccc"]):
        with ctx.item(index) as item:
            if text == "bb":
                raise KeyError(text)
            item.result = len(text)
    with ctx.item(7):
        ctx.item_failed(7, "told by hand")  # the block's own outcome wins

    assert outcomes(ctx) == [
        (0, "ok", 1, None),
        (1, "failed", None, "KeyError: 'bb'"),
        (2, "ok", 3, None),
        (7, "failed", None, "told by hand"),
    ]


def test_a_stop_is_not_an_item_failure() -> None:
    ctx = JobContext(claimed(), "w")
    ctx.request_stop(StopReason.CANCELLED)
    with pytest.raises(JobStopped), ctx.item(0):
        ctx.raise_if_stopped()
    with pytest.raises(RuntimeError), ctx.item(1):
        raise RuntimeError("raised because it was stopped")
    assert ctx.pending() is None


def test_an_item_has_one_outcome_and_results_must_be_json() -> None:
    ctx = JobContext(claimed(), "w")
    ctx.item_done(0, {"a": 1})
    with pytest.raises(InvalidInput, match="already has an outcome"):
        ctx.item_failed(0, "again")
    with pytest.raises(InvalidInput, match="item 1"):
        ctx.item_done(1, {"x": object()})
    with pytest.raises(InvalidInput, match="non-negative"):
        ctx.item_done(-1)
    with pytest.raises(InvalidInput, match="empty error"):
        ctx.item_failed(2, "  ")
    assert [o.index for o in ctx.pending().items] == [0]  # type: ignore[union-attr]


@pytest.mark.parametrize(("limit", "fails_at"), [(2, 2), (0, 0), (0.25, 3)])
def test_past_max_item_failures_the_attempt_fails_naming_the_count(limit: float, fails_at: int) -> None:
    ctx = JobContext(claimed(), "w", max_item_failures=limit)

    def work(n: int) -> int:
        if n % 2 == 0:
            raise ValueError(f"item {n} is bad")
        return n

    with pytest.raises(TooManyItemFailures) as raised:
        ctx.map(list(range(12)), work)

    message = str(raised.value)
    failed = raised.value.failed
    assert message.startswith(f"{failed} of 12 items failed, more than max_item_failures allows")
    assert "item 0: ValueError: item 0 is bad" in message
    assert failed == fails_at + 1 and ctx.items_failed == failed


def test_item_limits_are_checked() -> None:
    assert check_limit(None) is None and check_limit(3) == 3 and check_limit(0.5) == 0.5
    for bad in (-1, 0.0, 1.0, 1.5, True, "3"):
        with pytest.raises(InvalidInput):
            check_limit(bad)  # type: ignore[arg-type]
    assert not exceeded(None, 10**6, 10)
    assert exceeded(0.1, 2, 10) and not exceeded(0.1, 1, 10) and not exceeded(0.1, 5, None)


def test_a_resumed_attempt_skips_every_item_with_an_outcome() -> None:
    ctx = JobContext(claimed({"position": 3, "state": {}, "outcomes": True}), "w", max_item_failures=5)
    ctx.resume_items([stored(0, ItemState.OK, "a"), stored(1, ItemState.FAILED), stored(4, ItemState.OK, "e")])

    results = ctx.map(["A", "B", "C", "D", "E", "F"], str.lower)

    assert [o.index for o in ctx.pending().items] == [2, 3, 5]  # type: ignore[union-attr]
    assert results == ["a", "c", "d", "e", "f"], "earlier attempts' results are in the answer"
    assert (ctx.items_ok, ctx.items_failed, ctx.done) == (5, 1, 6)


def test_a_retry_past_the_limit_runs_the_failed_items_again() -> None:
    ctx = JobContext(claimed({"position": 4, "state": {}, "outcomes": True}), "w", max_item_failures=1)
    ctx.resume_items(
        [
            stored(0, ItemState.OK, "a"),
            stored(1, ItemState.FAILED),
            stored(2, ItemState.FAILED),
            stored(3, ItemState.OK, "d"),
        ]
    )

    seen = []
    ctx.map(["A", "B", "C", "D"], lambda x: seen.append(x) or x.lower())

    assert seen == ["B", "C"]
    assert (ctx.items_ok, ctx.items_failed) == (4, 0)


def test_after_a_replay_of_failed_items_only_those_run_whatever_the_position() -> None:
    ctx = JobContext(claimed({"position": 5, "state": {}, "outcomes": True}), "w")
    ctx.resume_items([stored(i, ItemState.OK, i) for i in (0, 1, 3)])

    ran = [index for index, _ in ctx.enumerate("abcde")]

    assert ran == [2, 4]


def test_items_without_outcomes_resume_from_the_position_as_before() -> None:
    ctx = JobContext(claimed({"position": 2, "state": {"seen": [0, 1]}}), "w")
    assert [index for index, _ in ctx.enumerate("abcd")] == [2, 3]
    assert "outcomes" not in ctx.last_checkpoint  # type: ignore[operator]
