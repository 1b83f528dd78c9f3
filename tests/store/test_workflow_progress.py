"""A workflow as a whole, on both stores: every job linked to it (a batch's graph, a handler's
follow-ups, a later job naming one of it as a parent) carries its id, and its progress is
counted by state in one read."""

from __future__ import annotations

import uuid

from service.jobs import ClaimedJob, Completion, JobQuery, NewJob
from service.store import Store
from service.workflows import WorkflowProgress
from tests.store.builders import fail_job, new_job


def claim_all(store: Store) -> dict[uuid.UUID, ClaimedJob]:
    return {job.id: job for job in store.claim("worker-a", ["default"], 1000, 30)}


def counts(progress: WorkflowProgress) -> tuple[int, int, int, int, int, int]:
    p = progress
    return (p.queued, p.waiting, p.running, p.succeeded, p.failed, p.cancelled)


def test_a_batch_graph_a_handlers_child_and_a_later_child_share_one_workflow_whose_progress_moves(store: Store):
    split, left, right, merge = store.enqueue_many(
        [
            new_job("split"),
            new_job("left", depends_on=(0,)),
            new_job("right", depends_on=(0,)),
            new_job("merge", depends_on=(1, 2)),
        ]
    )
    workflow = split.id  # the batch's first job is its root
    assert {j.workflow_id for j in (split, left, right, merge)} == {workflow}
    assert store.get(merge.id).workflow_id == workflow
    assert counts(store.workflow_progress(workflow)) == (4, 3, 0, 0, 0, 0)

    # split runs; its handler enqueues a follow-up (no dependencies), written with its result.
    [job] = claim_all(store).values()
    assert counts(store.workflow_progress(workflow)) == (3, 3, 1, 0, 0, 0)
    assert store.complete_many([Completion(job.lease, "s", children=(NewJob("audit"),))]) == []
    [audit] = store.list_jobs(JobQuery(kind="audit")).items
    assert audit.workflow_id == workflow
    # A POST with depends_on naming a job of the workflow, later.
    late = store.enqueue(new_job("publish", depends_on=(merge.id,)))
    assert late.workflow_id == workflow

    progress = store.workflow_progress(workflow)
    assert (progress.total, progress.done) == (6, 1)
    assert counts(progress) == (5, 2, 0, 1, 0, 0)  # left, right, audit due; merge, publish wait

    running = claim_all(store)
    assert counts(store.workflow_progress(workflow)) == (2, 2, 3, 1, 0, 0)
    for job in running.values():
        store.complete(job.lease, "ok")
    assert counts(store.workflow_progress(workflow)) == (2, 1, 0, 4, 0, 0)  # merge due, publish waits
    [merging] = claim_all(store).values()
    fail_job(store, merging, "bad merge", retryable=False)

    progress = store.workflow_progress(workflow)
    assert counts(progress) == (0, 0, 0, 4, 1, 1)  # publish cancelled by its parent's failure
    assert (progress.done, progress.total) == (6, 6)


def test_independent_jobs_keep_no_workflow(store: Store):
    alone = store.enqueue(new_job())
    batch = store.enqueue_many([new_job(), new_job()])
    mixed = store.enqueue_many([new_job("a"), new_job("b", depends_on=(0,)), new_job("c")])

    assert [j.workflow_id for j in (alone, *batch)] == [None, None, None]
    assert store.get(alone.id).workflow_id is None
    assert mixed[0].workflow_id == mixed[1].workflow_id == mixed[0].id
    assert mixed[2].workflow_id is None  # in a workflow's batch, but linked to nothing


def test_a_stored_job_named_as_a_parent_becomes_its_workflows_root(store: Store):
    parent = store.enqueue(new_job("split"))
    assert parent.workflow_id is None

    child = store.enqueue(new_job("chunk", depends_on=(parent.id,)))

    assert child.workflow_id == parent.id
    assert store.get(parent.id).workflow_id == parent.id
    assert store.workflow_progress(parent.id).total == 2


def test_a_finished_parent_joins_the_workflow_of_the_child_named_after_it(store: Store):
    parent = store.enqueue(new_job())
    [job] = store.claim("worker-a", ["default"], 1, 30)
    store.complete(job.lease, "ok")

    child = store.enqueue(new_job(depends_on=(parent.id,)))

    finished = store.get(parent.id)
    assert (finished.state, finished.workflow_id, child.workflow_id) == ("succeeded", parent.id, parent.id)
    assert (store.workflow_progress(parent.id).done, store.workflow_progress(parent.id).total) == (1, 2)


def test_a_job_with_parents_in_two_workflows_joins_the_older_and_a_lone_parent_joins_it_too(store: Store):
    first = store.enqueue_many([new_job("a"), new_job("a2", depends_on=(0,))])
    second = store.enqueue_many([new_job("b"), new_job("b2", depends_on=(0,))])
    lone = store.enqueue(new_job("c"))

    # named newest first: the answer does not depend on the order
    fan_in = store.enqueue(new_job("merge", depends_on=(lone.id, second[1].id, first[1].id)))

    assert fan_in.workflow_id == first[0].id == min(first[0].id, second[0].id)
    assert store.get(lone.id).workflow_id == first[0].id
    assert store.get(second[0].id).workflow_id == second[0].id  # the other workflow is not rewritten
    assert store.workflow_progress(first[0].id).total == 4
    assert store.workflow_progress(second[0].id).total == 2


def test_an_independent_jobs_handler_children_make_it_a_workflow_root(store: Store):
    parent = store.enqueue(new_job("split"))
    [job] = store.claim("worker-a", ["default"], 1, 30)

    children = (NewJob("chunk", idempotency_key="c0"), NewJob("chunk", idempotency_key="c1", depends_on=(0,)))
    assert store.complete_many([Completion(job.lease, "ok", children=children)]) == []

    assert store.get(parent.id).workflow_id == parent.id
    assert {s.workflow_id for s in store.list_jobs(JobQuery(kind="chunk")).items} == {parent.id}
    assert counts(store.workflow_progress(parent.id)) == (2, 1, 0, 1, 0, 0)


def test_a_workflows_progress_is_scoped_to_its_tenant(store: Store):
    root, _ = store.enqueue_many([new_job(tenant="acme"), new_job(tenant="acme", depends_on=(0,))])

    assert store.workflow_progress(root.id, "acme").total == 2
    assert store.workflow_progress(root.id, "globex").total == 0
    assert store.workflow_progress(uuid.uuid4()).total == 0
