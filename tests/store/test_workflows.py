"""Workflows on both stores: jobs that wait for parents, are released by the statement that
completes the last one, and are cancelled (or run anyway) when a parent fails."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

from service.errors import IdempotencyConflict, InvalidInput, JobNotFound
from service.jobs import ClaimRequest, Completion, JobState, NewJob, ReplayFilter
from service.store import Store
from service.workflows import MAX_PARENTS
from tests.conftest import Database, FakeClock, build_store
from tests.store.builders import claim_one, fail_job, new_job, reap


def claimable(store: Store) -> set[uuid.UUID]:
    """The ids a claim of every due job takes now (claimed: they run from here on)."""
    return {job.id for job in store.claim("worker-z", ["default"], 1000, 30)}


def run_to_success(store: Store, job_id: uuid.UUID, result: object = "ok") -> None:
    [job] = [job for job in store.claim("worker-a", ["default"], 1000, 30) if job.id == job_id] or [None]
    assert job is not None, "the job was not claimable"
    store.complete(job.lease, result)  # type: ignore[arg-type]


# -- waiting and release ---------------------------------------------------------------------


def test_a_child_is_queued_but_not_claimable_until_its_parent_succeeds(store: Store):
    parent = store.enqueue(new_job("split"))
    child = store.enqueue(new_job("classify", depends_on=(parent.id,)))

    assert (child.state, child.parents_total, child.parents_pending) == (JobState.QUEUED, 1, 1)
    assert store.has_claimable(["default"])  # the parent
    running = claim_one(store)
    assert running.id == parent.id
    assert store.claim("worker-b", ["default"], 10, 30) == []  # the child waits
    assert not store.has_claimable(["default"])

    store.complete(running.lease, {"chunks": 3})

    status = store.get(child.id)
    assert (status.state, status.parents_pending) == (JobState.QUEUED, 0)
    assert claim_one(store, "worker-b").id == child.id


def test_a_child_waits_for_every_parent(store: Store):
    parents = store.enqueue_many([new_job("transcribe", payload={"n": n}) for n in range(3)])
    child = store.enqueue(new_job("publish", depends_on=tuple(p.id for p in parents)))
    jobs = {job.id: job for job in store.claim("worker-a", ["default"], 10, 30)}
    assert set(jobs) == {p.id for p in parents}

    store.complete(jobs[parents[0].id].lease, 0)
    store.complete(jobs[parents[1].id].lease, 1)
    assert store.get(child.id).parents_pending == 1
    assert claimable(store) == set()
    store.complete(jobs[parents[2].id].lease, 2)

    assert claimable(store) == {child.id}


def test_one_completion_releases_a_fan_out_of_a_thousand_children(store: Store):
    parent = store.enqueue(new_job("split"))
    children = store.enqueue_many([new_job("chunk", payload={"n": n}, depends_on=(parent.id,)) for n in range(1000)])
    job = claim_one(store)

    store.complete(job.lease, "split")

    assert len(claimable(store)) == 1000
    assert {store.get(c.id).parents_pending for c in children[:10]} == {0}


WIDE = 8000


def claim_all(store: Store) -> int:
    """How many jobs claims take, a thousand at a time, until none is due."""
    taken = 0
    while batch := store.claim("worker-z", ["default"], 1000, 30):
        taken += len(batch)
    return taken


@pytest.mark.slow
def test_a_wide_fan_out_is_released_in_time_linear_in_its_children(store: Store):
    # The release finds each child by its primary key. Joined as a set, a plan made while few
    # jobs waited read every held job once per child: 4.4 s for 10,000 children, the fan-out's
    # whole completion (docs/PERFORMANCE.md, "workflows"); this is about 0.1 s.
    parent = store.enqueue(new_job("split"))
    store.enqueue_many([new_job("chunk", payload={}, depends_on=(parent.id,)) for _ in range(WIDE)])
    job = claim_one(store)

    started = time.monotonic()  # as a worker finishes: the completion and its refill in one transaction
    lost, refilled = store.complete_and_claim([Completion(job.lease, "split")], ClaimRequest("w", ("default",), 10, 30))
    took = time.monotonic() - started

    assert (lost, len(refilled)) == ([], 10)
    assert claim_all(store) == WIDE - 10
    assert took < 1.5, f"releasing {WIDE:,} children took {took:.2f} s"


@pytest.mark.slow
def test_a_wide_fan_out_is_cancelled_in_time_linear_in_its_children(store: Store):
    parent = store.enqueue(new_job("split"))
    children = store.enqueue_many([new_job("chunk", payload={}, depends_on=(parent.id,)) for _ in range(WIDE)])
    job = claim_one(store)

    started = time.monotonic()
    fail_job(store, job, "boom", retryable=False)
    took = time.monotonic() - started

    assert {store.get(c.id).state for c in children[:: WIDE // 20]} == {JobState.CANCELLED}
    assert claimable(store) == set()
    assert took < 1.5, f"cancelling {WIDE:,} children took {took:.2f} s"


@pytest.mark.slow
def test_a_wide_fan_out_that_runs_anyway_is_released_by_a_failure_in_linear_time(store: Store):
    parent = store.enqueue(new_job("split"))
    store.enqueue_many(
        [new_job("chunk", payload={}, depends_on=(parent.id,), on_parent_failure="run") for _ in range(WIDE)]
    )
    job = claim_one(store)

    started = time.monotonic()
    fail_job(store, job, "boom", retryable=False)
    took = time.monotonic() - started

    assert claim_all(store) == WIDE
    assert took < 1.5, f"releasing {WIDE:,} children after a failure took {took:.2f} s"


def test_a_child_submitted_after_its_parent_succeeded_is_due_at_once(store: Store):
    parent = store.enqueue(new_job())
    store.complete(claim_one(store).lease, "done")

    child = store.enqueue(new_job(depends_on=(parent.id,)))

    assert (child.parents_total, child.parents_pending) == (1, 0)
    assert claimable(store) == {child.id}


def test_a_released_child_keeps_its_own_delay(store: Store, clock: FakeClock):
    parent = store.enqueue(new_job())
    child = store.enqueue(new_job(depends_on=(parent.id,), delay_seconds=60))
    clock.advance(10)
    store.complete(claim_one(store).lease, "done")

    assert claimable(store) == set()
    clock.advance(51)
    assert claimable(store) == {child.id}


def test_a_whole_graph_goes_in_one_batch_by_position(store: Store):
    split, a, b, merge = store.enqueue_many(
        [
            new_job("split"),
            new_job("left", depends_on=(0,)),
            new_job("right", depends_on=(0,)),
            new_job("merge", depends_on=(1, 2)),
        ]
    )

    assert [j.parents_total for j in (split, a, b, merge)] == [0, 1, 1, 2]
    store.complete(claim_one(store).lease, "s")
    assert claimable(store) == {a.id, b.id}
    assert store.get(merge.id).parents_pending == 2


def test_parent_results_come_in_one_read_oldest_parent_first(store: Store):
    first, second, child = store.enqueue_many([new_job(), new_job(), new_job(depends_on=(1, 0))])
    jobs = {job.id: job for job in store.claim("worker-a", ["default"], 2, 30)}
    store.complete(jobs[second.id].lease, {"n": 2})
    store.complete(jobs[first.id].lease, {"n": 1})

    results = store.parent_results(child.id)

    assert [(r.id, r.state, r.result) for r in results] == [
        (first.id, JobState.SUCCEEDED, {"n": 1}),
        (second.id, JobState.SUCCEEDED, {"n": 2}),
    ]


def test_dependencies_page_both_ways_scoped_to_the_tenant(store: Store):
    parent = store.enqueue(new_job(tenant="acme"))
    kids = store.enqueue_many([new_job(tenant="acme", depends_on=(parent.id,)) for _ in range(3)])

    page = store.dependencies(parent.id, "acme", limit=2)
    assert [c.id for c in page.children] == sorted(k.id for k in kids)[:2]
    assert page.children_after == sorted(k.id for k in kids)[1]
    rest = store.dependencies(parent.id, "acme", limit=2, children_after=page.children_after)
    assert [c.id for c in rest.children] == [sorted(k.id for k in kids)[2]] and rest.children_after is None
    up = store.dependencies(kids[0].id, "acme")
    assert [(p.id, p.state) for p in up.parents] == [(parent.id, JobState.QUEUED)]
    with pytest.raises(JobNotFound):
        store.dependencies(parent.id, "other")


# -- refusals: nothing written -----------------------------------------------------------------


def test_an_unknown_parent_is_refused_like_any_missing_job(store: Store, db: Database):
    missing = uuid.uuid4()
    with pytest.raises(JobNotFound) as refused:
        store.enqueue_many([new_job(), new_job(depends_on=(missing,))])
    assert str(refused.value) == str(JobNotFound(missing))
    assert db.count("jobs") == 0 and db.count("job_edges") == 0


def test_another_tenants_parent_is_refused_the_same_way(store: Store, db: Database):
    theirs = store.enqueue(new_job(tenant="other"))
    with pytest.raises(JobNotFound) as refused:
        store.enqueue(new_job(tenant="acme", depends_on=(theirs.id,)))
    assert str(refused.value) == str(JobNotFound(theirs.id))
    assert db.count("jobs") == 1 and db.count("job_edges") == 0


@pytest.mark.parametrize("position", [1, 2])
def test_a_cycle_cannot_be_made_a_job_may_only_name_earlier_jobs(store: Store, db: Database, position: int):
    with pytest.raises(InvalidInput, match="earlier jobs of its batch"):
        store.enqueue_many([new_job(), new_job(depends_on=(position,)), new_job()])
    assert db.count("jobs") == 0


def test_too_many_parents_are_refused(store: Store, db: Database):
    with pytest.raises(InvalidInput, match=f"at most {MAX_PARENTS} parents"):
        store.enqueue(new_job(depends_on=tuple(uuid.uuid4() for _ in range(MAX_PARENTS + 1))))
    assert db.count("jobs") == 0


def test_on_parent_failure_must_be_cancel_or_run(store: Store):
    with pytest.raises(InvalidInput, match="on_parent_failure"):
        store.enqueue_many([new_job(), new_job(depends_on=(0,), on_parent_failure="ignore")])


def test_a_workflow_batch_sent_again_under_its_keys_answers_the_stored_jobs(store: Store, db: Database):
    batch = [new_job(idempotency_key="a"), new_job(idempotency_key="b", depends_on=(0,))]
    first = store.enqueue_many(batch)
    again = store.enqueue_many(batch)
    assert [j.id for j in again] == [j.id for j in first]
    assert db.count("jobs") == 2 and db.count("job_edges") == 1
    with pytest.raises(IdempotencyConflict):
        store.enqueue_many([new_job(idempotency_key="a"), new_job(idempotency_key="c", depends_on=(0,))])


# -- failure, cancellation, replay ----------------------------------------------------------------


def test_a_parent_that_fails_for_good_cancels_its_dependents_all_the_way_down(store: Store):
    parent, child, grandchild = store.enqueue_many([new_job(), new_job(depends_on=(0,)), new_job(depends_on=(1,))])
    job = claim_one(store)

    fail_job(store, job, "boom", retryable=False)

    child_status, grandchild_status = store.get(child.id), store.get(grandchild.id)
    assert child_status.state is JobState.CANCELLED
    assert child_status.error == f"cancelled: parent job {parent.id} failed"
    assert grandchild_status.state is JobState.CANCELLED
    assert grandchild_status.error == f"cancelled: parent job {child.id} was cancelled"
    assert claimable(store) == set()


def test_a_retried_parent_does_not_touch_its_dependents(store: Store):
    parent, child = store.enqueue_many([new_job(max_attempts=3), new_job(depends_on=(0,))])
    fail_job(store, claim_one(store), "flaky", retryable=True)
    status = store.get(child.id)
    assert (status.state, status.parents_pending) == (JobState.QUEUED, 1)


def test_a_child_that_runs_anyway_is_released_by_its_parents_failure(store: Store):
    parent, child = store.enqueue_many([new_job(), new_job(depends_on=(0,), on_parent_failure="run")])
    fail_job(store, claim_one(store), "boom", retryable=False)

    assert claimable(store) == {child.id}
    [result] = store.parent_results(child.id)
    assert (result.id, result.state, result.result) == (parent.id, JobState.FAILED, None)


def test_cancelling_a_queued_parent_cancels_its_dependents(store: Store):
    parent, child = store.enqueue_many([new_job(), new_job(depends_on=(0,))])
    store.cancel(parent.id)
    status = store.get(child.id)
    assert (status.state, status.error) == (JobState.CANCELLED, f"cancelled: parent job {parent.id} was cancelled")


def test_a_parent_whose_lease_expired_for_the_last_time_cancels_its_dependents(store: Store, clock: FakeClock):
    parent, child = store.enqueue_many([new_job(max_attempts=1), new_job(depends_on=(0,))])
    claim_one(store, lease_seconds=10)
    clock.advance(11)

    reap(store)

    assert store.get(parent.id).state is JobState.FAILED
    assert store.get(child.id).state is JobState.CANCELLED


def test_a_child_of_a_parent_that_already_failed_is_born_cancelled(store: Store):
    parent = store.enqueue(new_job())
    fail_job(store, claim_one(store), "boom", retryable=False)

    child, runs = store.enqueue_many(
        [
            new_job(depends_on=(parent.id,)),
            new_job(depends_on=(parent.id,), on_parent_failure="run"),
        ]
    )

    assert (child.state, child.error) == (JobState.CANCELLED, f"cancelled: parent job {parent.id} failed")
    assert (runs.state, runs.parents_pending) == (JobState.QUEUED, 0)


def test_replaying_a_failed_parent_rearms_what_it_cancelled_and_the_workflow_completes(store: Store, db: Database):
    parent, child, grandchild = store.enqueue_many([new_job(), new_job(depends_on=(0,)), new_job(depends_on=(1,))])
    fail_job(store, claim_one(store), "boom", retryable=False)
    born_late = store.enqueue(new_job(depends_on=(child.id,)))  # cancelled at birth: its parent was
    assert born_late.state is JobState.CANCELLED

    assert store.replay(ReplayFilter(ids=(parent.id,)), by="ops") == [parent.id]

    for job in (child, grandchild, born_late):
        status = store.get(job.id)
        assert (status.state, status.parents_pending, status.error) == (JobState.QUEUED, 1, None)
    replays = db.rows("SELECT job_id, replayed_by, previous_state FROM job_replays ORDER BY id")
    assert {r["job_id"] for r in replays} == {str(parent.id), str(child.id), str(grandchild.id), str(born_late.id)}
    assert {r["replayed_by"] for r in replays if r["job_id"] == str(child.id)} == {
        f"ops (re-armed: job {parent.id} was replayed)"
    }
    # and the workflow runs to the end, in order
    run_to_success(store, parent.id)
    run_to_success(store, child.id)
    assert claimable(store) == {grandchild.id, born_late.id}


def test_replaying_a_cancelled_child_waits_for_its_unfinished_parents(store: Store):
    parent, child = store.enqueue_many([new_job(), new_job(depends_on=(0,))])
    store.cancel(child.id)
    store.replay(ReplayFilter(ids=(child.id,), include_cancelled=True), by="ops")

    status = store.get(child.id)
    assert (status.state, status.parents_pending) == (JobState.QUEUED, 1)
    assert claimable(store) == {parent.id}


# -- PostgreSQL: a completion that races an enqueue of children -------------------------------


def test_a_completion_waiting_on_a_child_enqueue_still_releases_the_child(pg_url: str, clock: FakeClock):
    """The enqueue holds the parent's row (its transaction open) while the parent's completion
    starts and waits for it; the completion's snapshot cannot see the edge committed after it
    began, notices the parent's dependents_version moved, and completes it again behind a lock."""
    store = build_store(pg_url, clock)
    try:
        parent = store.enqueue(new_job())
        job = claim_one(store)
        with psycopg.connect(pg_url) as conn:
            child = store.enqueue(new_job(depends_on=(parent.id,)), connection=conn)  # parent locked until commit
            done = threading.Event()
            completer = threading.Thread(target=lambda: (store.complete(job.lease, "ok"), done.set()))
            completer.start()
            time.sleep(0.5)
            assert not done.is_set()  # waiting for the enqueue's lock
            conn.commit()
        completer.join(10)
        assert done.is_set()
        assert store.get(parent.id).state is JobState.SUCCEEDED
        status = store.get(child.id)
        assert (status.state, status.parents_pending) == (JobState.QUEUED, 0)
        assert claimable(store) == {child.id}
    finally:
        store.close()


def test_a_child_enqueued_in_a_transaction_that_rolls_back_leaves_nothing(pg_url: str, clock: FakeClock):
    store = build_store(pg_url, clock)
    db = Database(pg_url)
    try:
        parent = store.enqueue(new_job())
        with psycopg.connect(pg_url) as conn:
            store.enqueue(NewJob("k", depends_on=(parent.id,)), connection=conn)
            conn.rollback()
        assert db.count("job_edges") == 0 and db.count("jobs") == 1
        store.complete(claim_one(store).lease, "ok")
        assert store.get(parent.id).state is JobState.SUCCEEDED
    finally:
        db.close()
        store.close()


def test_explain_says_how_many_parents_it_waits_for_and_names_the_unfinished(store: Store):
    from service.explain import explain

    done, running, queued = store.enqueue_many([new_job("a"), new_job("b"), new_job("c")])
    child = store.enqueue(new_job("d", depends_on=(done.id, running.id, queued.id)))
    jobs = {job.id: job for job in store.claim("worker-a", ["default"], 2, 30)}
    store.complete(jobs[done.id].lease, "ok")

    explanation = explain(store.explain_facts(child.id, workers_seen_within=60))

    assert explanation.reasons[0].code == "waiting_for_parents"
    assert explanation.summary == (f"waiting for 2 of 3 parents: {running.id} (b, running), {queued.id} (c, queued)")


def test_a_parent_is_settled_once_a_stale_write_or_a_second_cancel_counts_nothing(store: Store):
    from service.errors import InvalidTransition

    first, second, child = store.enqueue_many(
        [
            new_job(),
            new_job(),
            new_job(depends_on=(0, 1), on_parent_failure="run"),
        ]
    )
    store.cancel(first.id)
    assert store.get(child.id).parents_pending == 1
    with pytest.raises(InvalidTransition):
        store.cancel(first.id)
    assert store.get(child.id).parents_pending == 1  # the second cancel settled nothing
    running = claim_one(store)
    assert running.id == second.id
    store.acknowledge_cancel(running.lease)  # ends it cancelled: the child's last parent
    store.acknowledge_cancel(running.lease)  # the same write again (its receipt answers): changes nothing
    status = store.get(child.id)
    assert (status.state, status.parents_pending) == (JobState.QUEUED, 0)


@pytest.mark.parametrize("replayed_first", ["the parent that cancelled it", "the other failed parent"])
def test_a_child_of_two_failed_parents_is_rearmed_by_the_replay_of_the_last_and_the_workflow_completes(
    store: Store, db: Database, replayed_first: str
):
    first, second, child, grandchild = store.enqueue_many(
        [
            new_job(),
            new_job(),
            new_job(depends_on=(0, 1)),
            new_job(depends_on=(2,)),
        ]
    )
    jobs = {job.id: job for job in store.claim("worker-a", ["default"], 2, 30)}
    fail_job(store, jobs[first.id], "boom", retryable=False)  # cancels the child and the grandchild
    fail_job(store, jobs[second.id], "boom too", retryable=False)
    assert store.get(child.id).error == f"cancelled: parent job {first.id} failed"
    early, last = (first, second) if replayed_first == "the parent that cancelled it" else (second, first)

    store.replay(ReplayFilter(ids=(early.id,)), by="ops")

    # the child's other parent is still failed: it stays cancelled, and so does its child, rather
    # than wait for a parent that will not run; its error names the parent that holds it now
    assert store.get(child.id).state is JobState.CANCELLED
    assert store.get(child.id).error == f"cancelled: parent job {last.id} failed"
    assert store.get(grandchild.id).state is JobState.CANCELLED
    assert store.get(grandchild.id).error == f"cancelled: parent job {child.id} was cancelled"
    assert db.count("job_replays") == 1  # only the replayed parent's

    store.replay(ReplayFilter(ids=(last.id,)), by="ops")

    for job, pending in ((child, 2), (grandchild, 1)):  # the child waits for both replayed parents
        status = store.get(job.id)
        assert (status.state, status.parents_pending, status.error) == (JobState.QUEUED, pending, None)
    assert {
        r["replayed_by"] for r in db.rows("SELECT replayed_by FROM job_replays") if "re-armed" in r["replayed_by"]
    } == {f"ops (re-armed: job {last.id} was replayed)"}
    jobs = {job.id: job for job in store.claim("worker-a", ["default"], 10, 30)}
    assert set(jobs) == {first.id, second.id}
    store.complete(jobs[first.id].lease, 1)
    assert claimable(store) == set()  # not before its last parent succeeded
    store.complete(jobs[second.id].lease, 2)
    run_to_success(store, child.id)
    run_to_success(store, grandchild.id)
    assert {store.get(job.id).state for job in (first, second, child, grandchild)} == {JobState.SUCCEEDED}


def test_replaying_a_failed_parent_makes_a_run_anyway_child_that_has_not_started_wait_again(store: Store):
    parent, other, child = store.enqueue_many(
        [
            new_job(),
            new_job(),
            new_job(depends_on=(0, 1), on_parent_failure="run"),
        ]
    )
    jobs = {job.id: job for job in store.claim("worker-a", ["default"], 2, 30)}
    fail_job(store, jobs[parent.id], "boom", retryable=False)
    assert store.get(child.id).parents_pending == 1  # the other parent still runs

    store.replay(ReplayFilter(ids=(parent.id,)), by="ops")

    assert store.get(child.id).parents_pending == 2  # the replayed parent runs again: it waits for it
    store.complete(jobs[other.id].lease, "ok")
    run_to_success(store, parent.id)
    assert claimable(store) == {child.id}


def test_replaying_a_failed_grandparent_makes_a_run_anyway_child_of_a_rearmed_job_wait_again(store: Store):
    """parent -> middle (cancel) -> child ('run'): the parent's failure cancels the middle job,
    which releases the child (its only parent ended); replaying the parent re-arms the middle
    job, and the child, not started yet, waits for it again like a 'run' child of the replayed
    job itself. Found by the stateful test on SQLite (a queued job counting 0 unfinished parents
    while its re-armed parent was queued: claimable before its parent ran)."""
    parent, middle, child = store.enqueue_many(
        [new_job(), new_job(depends_on=(0,)), new_job(depends_on=(1,), on_parent_failure="run")]
    )
    fail_job(store, claim_one(store), "boom", retryable=False)
    assert store.get(middle.id).state is JobState.CANCELLED
    assert store.get(child.id).parents_pending == 0  # released: it would run anyway

    store.replay(ReplayFilter(ids=(parent.id,)), by="ops")

    assert (store.get(middle.id).state, store.get(middle.id).parents_pending) == (JobState.QUEUED, 1)
    assert (store.get(child.id).state, store.get(child.id).parents_pending) == (JobState.QUEUED, 1)
    run_to_success(store, parent.id)
    assert claimable(store) == {middle.id}  # not the child: its parent has not run


def test_a_child_born_cancelled_under_a_cancelled_parent_is_released_by_it_after_a_replay(store: Store):
    """parent -> middle; the parent fails for good, cancelling the middle job; a child of the
    middle job submitted then is born cancelled. Replaying the parent re-arms both, and the
    middle job's success releases the child: its completion must look for children although it
    had none when it was submitted (the child's enqueue found it cancelled, and left it alone)."""
    parent, middle = store.enqueue_many([new_job(), new_job(depends_on=(0,))])
    fail_job(store, claim_one(store), "boom", retryable=False)
    late = store.enqueue(new_job(depends_on=(middle.id,)))
    assert late.state is JobState.CANCELLED

    store.replay(ReplayFilter(ids=(parent.id,)), by="ops")
    run_to_success(store, parent.id)
    run_to_success(store, middle.id)

    assert store.get(late.id).parents_pending == 0
    assert claimable(store) == {late.id}


def test_a_replayed_parent_that_was_cancelled_before_its_child_was_submitted_releases_it(store: Store):
    """A child ('run') submitted under a parent already cancelled, cancelled and replayed itself
    (by id: due, its parent ended); then the parent is replayed: the child waits for it again,
    and the parent's success must release it (the child's enqueue found the parent cancelled, and
    left it alone), and its second cancellation likewise."""
    parent = store.enqueue(new_job())
    store.cancel(parent.id)
    child = store.enqueue(new_job(depends_on=(parent.id,), on_parent_failure="run"))
    store.cancel(child.id)
    store.replay(ReplayFilter(ids=(child.id,), include_cancelled=True), by="ops")
    store.replay(ReplayFilter(ids=(parent.id,), include_cancelled=True), by="ops")
    assert store.get(child.id).parents_pending == 1  # waits for the replayed parent

    store.cancel(parent.id)

    assert store.get(child.id).parents_pending == 0  # 'run': its parent's end releases it
    assert claimable(store) == {child.id}
