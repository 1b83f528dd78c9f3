"""service.workflows' rules, without a database: wiring a batch, the common shapes, re-arming."""

from __future__ import annotations

import uuid

import pytest

from service.errors import InvalidInput, JobNotFound
from service.jobs import JobState, NewJob
from service.workflows import (
    RearmCandidate,
    StillCancelled,
    StoredParent,
    chain,
    group,
    parents_of,
    rearm,
    still_cancelled,
    wire,
    workflow_ids,
)

A, B, C = (uuid.UUID(int=n) for n in (1, 2, 3))


def ids(n: int) -> list[uuid.UUID]:
    return [uuid.UUID(int=100 + i) for i in range(n)]


def test_wiring_counts_unfinished_parents_once_each_and_marks_parents_with_children():
    stored = {
        A: StoredParent(A, "t", JobState.RUNNING, None),
        B: StoredParent(B, "t", JobState.SUCCEEDED, None),
    }
    jobs = [NewJob("a", tenant="t"), NewJob("b", tenant="t", depends_on=(A, B, 0, A, 0))]
    first, second = wire(jobs, ids(2), stored)
    assert (first.pending, first.has_children, second.has_children) == (0, True, False)
    assert second.parents == (A, B, ids(2)[0]) and second.pending == 2 and second.state is JobState.QUEUED


def test_a_failed_parent_cancels_at_birth_naming_it_and_the_root_for_replay():
    stored = {A: StoredParent(A, "t", JobState.CANCELLED, C)}  # cancelled by C's failure before
    cancelled, runs = wire(
        [NewJob("x", tenant="t", depends_on=(A,)), NewJob("y", tenant="t", depends_on=(A, 0), on_parent_failure="run")],
        ids(2),
        stored,
    )
    assert (cancelled.state, cancelled.error, cancelled.cancelled_by) == (
        JobState.CANCELLED,
        f"cancelled: parent job {A} was cancelled",
        C,
    )
    assert (runs.state, runs.pending) == (JobState.QUEUED, 0)  # both parents ended: it runs


def test_another_tenants_parent_and_a_missing_one_read_as_missing():
    stored = {A: StoredParent(A, "other", JobState.QUEUED, None)}
    with pytest.raises(JobNotFound, match=str(A)):
        wire([NewJob("x", tenant="t", depends_on=(A,))], ids(1), stored)
    with pytest.raises(JobNotFound, match=str(B)):
        wire([NewJob("x", tenant="t", depends_on=(B,))], ids(1), stored)
    with pytest.raises(JobNotFound):
        wire([NewJob("x", tenant="t"), NewJob("y", tenant="u", depends_on=(0,))], ids(2), {})


@pytest.mark.parametrize("bad", [-1, 1, 2, True, "0", 1.0])
def test_a_position_must_be_an_earlier_job_of_the_batch(bad: object):
    with pytest.raises(InvalidInput):
        wire([NewJob("a"), NewJob("b", depends_on=(bad,))], ids(2), {})  # type: ignore[arg-type]


def test_parents_are_ids_text_statuses_or_positions():
    class Status:
        id = A

    assert parents_of([A, str(B), Status(), 0]) == (A, B, A, 0)
    for bad in ("abc", [1.5], ["nope"], None):
        with pytest.raises(InvalidInput):
            parents_of(bad)


def test_chain_group_and_then_are_batches_of_positions():
    flow = chain(NewJob("split"), group([NewJob("x"), chain(NewJob("y1"), NewJob("y2"))]), NewJob("merge"))
    assert [j.kind for j in flow.jobs] == ["split", "x", "y1", "y2", "merge"]
    assert [j.depends_on for j in flow.jobs] == [(), (0,), (0,), (2,), (1, 3)]
    assert (flow.heads, flow.tails) == ((0,), (4,))
    chord = group([NewJob("a"), NewJob("b", depends_on=(A,))]).then(NewJob("c"))
    assert [j.depends_on for j in chord.jobs] == [(), (A,), (0, 1)]
    with pytest.raises(InvalidInput):
        chain(NewJob("a", depends_on=(0,)))
    with pytest.raises(InvalidInput):
        group([])


def test_rearm_keeps_cancelled_a_job_with_another_failed_parent_and_everything_below_it():
    child, grandchild, other = uuid.UUID(int=10), uuid.UUID(int=11), uuid.UUID(int=12)
    candidates = [
        RearmCandidate(child, JobState.CANCELLED, "cancel", ((A, JobState.QUEUED), (B, JobState.FAILED))),
        RearmCandidate(grandchild, JobState.CANCELLED, "cancel", ((child, JobState.CANCELLED),)),
        RearmCandidate(other, JobState.CANCELLED, "cancel", ((A, JobState.QUEUED), (C, JobState.SUCCEEDED))),
    ]
    chosen = rearm(candidates)
    assert chosen == {other: 1}
    # ... each now waiting on B's replay, its error naming the parent that holds it
    assert still_cancelled(candidates, chosen) == [
        StillCancelled(child, f"cancelled: parent job {B} failed", B),
        StillCancelled(grandchild, f"cancelled: parent job {child} was cancelled", B),
    ]


def test_a_job_held_by_a_parent_that_a_failure_cancelled_waits_on_that_failures_replay():
    child, grandchild = uuid.UUID(int=10), uuid.UUID(int=11)
    # listed below-first: the rule does not depend on the order the store read them in
    candidates = [
        RearmCandidate(grandchild, JobState.CANCELLED, "cancel", ((child, JobState.CANCELLED),)),
        RearmCandidate(
            child, JobState.CANCELLED, "cancel", ((A, JobState.QUEUED), (B, JobState.CANCELLED)), parent_roots={B: C}
        ),
    ]
    assert rearm(candidates) == {}
    assert still_cancelled(candidates, {}) == [
        StillCancelled(grandchild, f"cancelled: parent job {child} was cancelled", C),
        StillCancelled(child, f"cancelled: parent job {B} was cancelled", C),
    ]


def test_rearm_counts_re_armed_parents_and_lets_an_operators_replay_run_past_a_failed_parent():
    child, grandchild, replayed = uuid.UUID(int=10), uuid.UUID(int=11), uuid.UUID(int=12)
    chosen = rearm(
        [
            RearmCandidate(child, JobState.CANCELLED, "cancel", ((A, JobState.QUEUED),)),
            RearmCandidate(grandchild, JobState.CANCELLED, "run", ((child, JobState.CANCELLED), (B, JobState.FAILED))),
            RearmCandidate(replayed, JobState.QUEUED, "cancel", ((B, JobState.FAILED), (C, JobState.RUNNING))),
        ]
    )
    assert chosen == {child: 1, grandchild: 1, replayed: 1}


def test_a_batch_is_one_workflow_per_connected_graph_rooted_at_its_first_job():
    jobs = [
        NewJob("split"),
        NewJob("alone"),
        NewJob("left", depends_on=(0,)),
        NewJob("right", depends_on=(0,)),
        NewJob("merge", depends_on=(2, 3)),
        NewJob("other"),
        NewJob("after-other", depends_on=(5,)),
    ]
    new = ids(7)
    placed = workflow_ids(jobs, new, {})
    assert placed.jobs == [new[0], None, new[0], new[0], new[0], new[5], new[5]]
    assert placed.joined == {}


def test_parents_of_two_workflows_give_the_older_whatever_the_order_named_and_lone_parents_join_it():
    stored = {
        A: StoredParent(A, "t", JobState.RUNNING, None),  # independent until now
        B: StoredParent(B, "t", JobState.SUCCEEDED, None, workflow_id=uuid.UUID(int=20)),
        C: StoredParent(C, "t", JobState.QUEUED, None, workflow_id=uuid.UUID(int=10)),
    }
    for order in ((A, B, C), (C, B, A), (B, A, C)):
        placed = workflow_ids([NewJob("merge", depends_on=order)], ids(1), stored)
        assert placed.jobs == [uuid.UUID(int=10)] and placed.joined == {A: uuid.UUID(int=10)}


def test_a_handlers_follow_ups_join_its_workflow_or_make_it_a_root():
    spawner = A
    alone = {A: StoredParent(A, "t", JobState.SUCCEEDED, None)}
    placed = workflow_ids([NewJob("x"), NewJob("y", depends_on=(0,))], ids(2), alone, spawner)
    assert placed.jobs == [A, A] and placed.joined == {A: A}
    rooted = {A: StoredParent(A, "t", JobState.SUCCEEDED, None, workflow_id=B)}
    assert workflow_ids([NewJob("x")], ids(1), rooted, spawner) == type(placed)([B], {})
