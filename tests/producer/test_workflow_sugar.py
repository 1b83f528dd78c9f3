"""Workflows from Python: ``depends_on`` in ``Queue.enqueue``, and ``chain``, ``group`` and
``group([...]).then(x)``, each submitted as one batch (both stores)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from service import NewJob, Queue, chain, group
from service.errors import InvalidInput, JobNotFound
from service.jobs import JobState
from tests.conftest import Database


@pytest.fixture
def queue(store_url: str) -> Iterator[Queue]:
    with Queue(store_url) as opened:
        yield opened


def parents(db: Database, child: uuid.UUID) -> set[str]:
    return {r["parent"] for r in db.rows("SELECT parent FROM job_edges WHERE child = %(c)s", c=str(child))}


def test_enqueue_takes_parents_as_ids_text_or_statuses(queue: Queue, db: Database) -> None:
    a, b = queue.enqueue("a"), queue.enqueue("b")
    child = queue.enqueue("c", depends_on=[a, str(b.id)], on_parent_failure="run")
    assert (child.parents_total, child.parents_pending) == (2, 2)
    assert parents(db, child.id) == {str(a.id), str(b.id)}
    with pytest.raises(JobNotFound):
        queue.enqueue("d", depends_on=[uuid.uuid4()])
    with pytest.raises(InvalidInput):
        queue.enqueue("d", depends_on="not-a-list")


def test_chain_runs_each_step_after_the_one_before_in_one_batch(queue: Queue, db: Database) -> None:
    a, b, c = queue.enqueue_workflow(chain(NewJob("a"), NewJob("b"), NewJob("c")))
    assert parents(db, b.id) == {str(a.id)} and parents(db, c.id) == {str(b.id)}
    assert [j.parents_pending for j in (a, b, c)] == [0, 1, 1]


def test_a_group_then_a_job_is_a_chord(queue: Queue, db: Database) -> None:
    flow = group([NewJob("t", payload={"lang": lang}) for lang in ("de", "fr", "ja")]).then(NewJob("publish"))
    *translations, publish = queue.enqueue_workflow(flow)
    assert parents(db, publish.id) == {str(t.id) for t in translations}
    assert all(t.parents_total == 0 for t in translations) and publish.parents_pending == 3


def test_groups_and_chains_nest(queue: Queue, db: Database) -> None:
    flow = chain(NewJob("split"), group([chain(NewJob("x1"), NewJob("x2")), NewJob("y")]), NewJob("merge"))
    split, x1, x2, y, merge = queue.enqueue_workflow(flow)
    assert parents(db, x1.id) == {str(split.id)} and parents(db, y.id) == {str(split.id)}
    assert parents(db, x2.id) == {str(x1.id)}
    assert parents(db, merge.id) == {str(x2.id), str(y.id)}
    assert all(j.state is JobState.QUEUED for j in (split, x1, x2, y, merge))
