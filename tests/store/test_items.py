"""Item outcomes: written with the heartbeat and with the result, fenced like them, counted on
the job row, read back in item order and paged, replayed item by item; on both stores."""

from __future__ import annotations

import uuid

import pytest

from service.errors import InvalidInput, JobNotFound
from service.jobs import (
    Completion,
    ItemOutcome,
    ItemQuery,
    ItemState,
    JobState,
    ReplayFilter,
)
from service.store import Store
from tests.conftest import Database, FakeClock
from tests.plans import pg_plan_nodes
from tests.store.builders import claim_one, new_job, reap


def ok(index: int, result: object = None) -> ItemOutcome:
    return ItemOutcome(index, ItemState.OK, result=result)


def failed(index: int, error: str = "ValueError: bad row") -> ItemOutcome:
    return ItemOutcome(index, ItemState.FAILED, error=error)


def all_items(store: Store, job_id: uuid.UUID, **fields: object) -> list[tuple[int, str]]:
    page = store.list_items(ItemQuery(job_id=job_id, limit=200, **fields))  # type: ignore[arg-type]
    return [(item.index, item.state.value) for item in page.items]


def test_a_heartbeat_writes_its_items_and_the_counts(store: Store, clock: FakeClock):
    store.enqueue(new_job(total=5))
    job = claim_one(store)

    beat = store.heartbeat(job.lease, 30, done=3, items=[ok(0, {"label": "a"}), failed(1), ok(2, None)])

    assert beat.held
    status = store.get(job.id)
    assert (status.done, status.items_ok, status.items_failed) == (3, 2, 1)
    page = store.list_items(ItemQuery(job_id=job.id))
    assert [(i.index, i.state, i.result, i.error) for i in page.items] == [
        (0, ItemState.OK, {"label": "a"}, None),
        (1, ItemState.FAILED, None, "ValueError: bad row"),
        (2, ItemState.OK, None, None),
    ]
    assert {i.attempt for i in page.items} == {1}
    assert {i.finished_at for i in page.items} == {clock.now()}
    assert page.next_after_index is None


def test_items_come_with_the_result_in_the_same_write(store: Store):
    store.enqueue_many([new_job(), new_job()])
    first, second = store.claim("worker-a", ["default"], 2, 30)
    store.heartbeat(first.lease, 30, items=[ok(0)])

    lost = store.complete_many(
        [
            Completion(first.lease, {"n": 2}, items=(ok(1, "b"),)),
            Completion(second.lease, {"n": 1}, items=(failed(0),)),
        ]
    )

    assert lost == []
    assert all_items(store, first.id) == [(0, "ok"), (1, "ok")]
    assert all_items(store, second.id) == [(0, "failed")]
    assert (store.get(first.id).items_ok, store.get(second.id).items_failed) == (2, 1)
    assert store.get(first.id).state is JobState.SUCCEEDED


def test_a_lost_lease_writes_no_item(store: Store, clock: FakeClock, db: Database):
    store.enqueue(new_job(max_attempts=3))
    stale = claim_one(store, lease_seconds=5)
    store.heartbeat(stale.lease, 5, items=[ok(0)])
    clock.advance(6)
    reap(store)
    clock.advance(700)  # past any backoff
    current = claim_one(store, "worker-b")

    beat = store.heartbeat(stale.lease, 5, items=[ok(1), failed(2)])
    lost = store.complete_many([Completion(stale.lease, "late", items=(ok(3),))])

    assert not beat.held and lost == [stale.lease]
    assert all_items(store, current.id) == [(0, "ok")]
    assert db.count("job_items") == 1
    status = store.get(current.id)
    assert (status.items_ok, status.items_failed) == (1, 0)
    assert current.items_ok == 1, "the claim says which outcomes earlier attempts left"


def test_an_item_given_again_replaces_its_outcome_and_the_counts_follow(store: Store):
    store.enqueue(new_job())
    job = claim_one(store)
    store.heartbeat(job.lease, 30, items=[failed(0), failed(1), ok(2)])

    store.heartbeat(job.lease, 30, items=[ok(0, "fixed"), failed(1, "KeyError: again")])

    status = store.get(job.id)
    assert (status.items_ok, status.items_failed) == (2, 1)
    page = store.list_items(ItemQuery(job_id=job.id))
    assert [(i.index, i.state.value, i.result, i.error) for i in page.items] == [
        (0, "ok", "fixed", None),
        (1, "failed", None, "KeyError: again"),
        (2, "ok", None, None),
    ]


def test_items_page_in_order_and_by_state(store: Store):
    store.enqueue(new_job())
    job = claim_one(store)
    store.heartbeat(job.lease, 30, items=[failed(i) if i % 4 == 0 else ok(i) for i in reversed(range(10))])

    first = store.list_items(ItemQuery(job_id=job.id, limit=4))
    second = store.list_items(ItemQuery(job_id=job.id, limit=4, after_index=first.next_after_index))
    third = store.list_items(ItemQuery(job_id=job.id, limit=4, after_index=second.next_after_index))

    assert [i.index for i in first.items + second.items + third.items] == list(range(10))
    assert third.next_after_index is None
    assert all_items(store, job.id, state=ItemState.FAILED) == [(0, "failed"), (4, "failed"), (8, "failed")]
    assert [i for i, _ in all_items(store, job.id, state=ItemState.OK)] == [1, 2, 3, 5, 6, 7, 9]
    failed_page = store.list_items(ItemQuery(job_id=job.id, state=ItemState.FAILED, limit=2))
    assert [i.index for i in failed_page.items] == [0, 4] and failed_page.next_after_index == 4


def test_items_are_scoped_by_tenant(store: Store):
    theirs = store.enqueue(new_job(tenant="acme"))
    mine = store.enqueue(new_job(tenant="globex"))

    assert store.list_items(ItemQuery(job_id=theirs.id, tenant="acme")).items == []
    assert store.list_items(ItemQuery(job_id=mine.id, tenant="globex")).next_after_index is None
    with pytest.raises(JobNotFound):
        store.list_items(ItemQuery(job_id=theirs.id, tenant="globex"))
    with pytest.raises(JobNotFound):
        store.list_items(ItemQuery(job_id=uuid.uuid4()))


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (ItemOutcome(-1, ItemState.OK), "non-negative"),
        (ItemOutcome(0, ItemState.FAILED, error=" "), "needs a non-empty error"),
        (ItemOutcome(0, ItemState.OK, result={"x": float("nan")}), "item result"),
        (ItemOutcome(0, ItemState.OK, result="nul \x00"), "item result"),
    ],
)
def test_bad_item_outcomes_are_refused_and_nothing_is_written(store: Store, db: Database, item, message):
    store.enqueue(new_job())
    job = claim_one(store)

    with pytest.raises(InvalidInput, match=message):
        store.heartbeat(job.lease, 30, done=1, items=[ok(1), item])

    assert db.count("job_items") == 0
    assert db.job(job.id)["done"] == 0


def test_replay_of_failed_items_picks_jobs_with_failed_items_and_is_recorded(store: Store, db: Database):
    store.enqueue_many([new_job(total=2), new_job()])
    with_failures, clean = store.claim("worker-a", ["default"], 2, 30)
    store.complete_many(
        [
            Completion(with_failures.lease, "partial", items=(ok(0), failed(1))),
            Completion(clean.lease, "done", items=(ok(0),)),
        ]
    )
    which = ReplayFilter(ids=(with_failures.id, clean.id), failed_items=True)

    dry = store.replay(which, by="cli:ann", dry_run=True)
    assert all_items(store, with_failures.id) == [(0, "ok"), (1, "failed")], "a dry run changes nothing"
    replayed = store.replay(which, by="cli:ann")

    assert dry == replayed == [with_failures.id]
    status = store.get(with_failures.id)
    assert (status.state, status.attempts, status.items_ok, status.items_failed) == (JobState.QUEUED, 0, 1, 0)
    assert status.done == 1
    assert all_items(store, with_failures.id) == [(0, "ok")]
    assert db.rows("SELECT replayed_by, previous_state FROM job_replays") == [
        {"replayed_by": "cli:ann", "previous_state": "succeeded"}
    ]
    assert store.get(clean.id).state is JobState.SUCCEEDED
    assert store.replay(which, by="cli:ann") == [], "nothing failed is left to replay"


def test_a_replay_of_failed_items_reruns_only_those(store: Store):
    store.enqueue(new_job(total=4))
    job = claim_one(store)
    store.complete_many([Completion(job.lease, "partial", items=(ok(0, "a"), failed(1), ok(2, "c"), failed(3)))])

    assert store.replay(ReplayFilter(ids=(job.id,), failed_items=True), by="cli:ann") == [job.id]

    again = claim_one(store)
    assert (again.items_ok, again.items_failed, again.attempt) == (2, 0, 1)
    assert all_items(store, job.id) == [(0, "ok"), (2, "ok")]
    store.complete_many([Completion(again.lease, "all", items=(ok(1, "b"), ok(3, "d")))])
    status = store.get(job.id)
    assert (status.state, status.items_ok, status.items_failed) == (JobState.SUCCEEDED, 4, 0)
    assert [i.result for i in store.list_items(ItemQuery(job_id=job.id)).items] == ["a", "b", "c", "d"]


def test_items_are_pruned_with_their_job(store: Store, clock: FakeClock, db: Database):
    store.enqueue(new_job())
    job = claim_one(store)
    store.complete_many([Completion(job.lease, None, items=(ok(0), failed(1)))])
    clock.advance(86_400 * 50)

    assert store.prune(older_than_seconds=86_400 * 42) == 1

    assert db.count("job_items") == 0


ITEM_HISTORY_JOBS, ITEMS_PER_JOB = 2_000, 50


def _seed_item_history(db: Database, beside: uuid.UUID) -> None:
    """50 outcomes (5 failed) for every job but ``beside``: 100,000 rows of other jobs' items."""
    numbers = (
        "SELECT generate_series(0, %(last)s) AS n"
        if db.dialect == "postgresql"
        else "WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < %(last)s) SELECT n FROM s"
    )
    db.execute(
        f"""INSERT INTO job_items (job_id, item_index, state, error, attempt, finished_at)
            SELECT j.id, g.n, CASE WHEN g.n IN (3, 13, 23, 33, 43) THEN 'failed' ELSE 'ok' END,
                   CASE WHEN g.n IN (3, 13, 23, 33, 43) THEN 'ValueError: bad row' END, 1, j.created_at
            FROM jobs AS j CROSS JOIN ({numbers}) AS g WHERE j.id <> %(beside)s""",
        last=ITEMS_PER_JOB - 1,
        beside=beside,
    )
    db.execute("ANALYZE")


def _item_plan(db: Database, statement: str, params: dict[str, object]) -> list[str]:
    """What the plan does with job_items: "Seq Scan" / "Index Scan ix_…" (PostgreSQL), or
    SQLite's "SCAN job_items" / "SEARCH job_items USING INDEX …" lines."""
    if db.dialect == "postgresql":
        nodes, _plan = pg_plan_nodes(db, statement, params)
        return [
            f"{n['Node Type']} {n.get('Index Name', '')}".strip()
            for n in nodes
            if n.get("Relation Name") == "job_items"
        ]
    rows = db.rows("EXPLAIN QUERY PLAN " + statement, **params)
    return [str(r["detail"]) for r in rows if "job_items" in str(r["detail"])]


@pytest.mark.slow
@pytest.mark.parametrize("state", [None, ItemState.FAILED])
def test_a_page_of_items_reads_its_jobs_items_through_an_index(store: Store, db: Database, state):
    """A job's items in order (the primary key) and its failed items (ix_job_items_failed), with
    100,000 outcomes of 2,000 other jobs beside them: the page never reads the whole table."""
    from service.store.postgres import queries as pg
    from service.store.sqlite import queries as lite

    store.enqueue_many([new_job() for _ in range(ITEM_HISTORY_JOBS)])
    mine = store.enqueue(new_job())
    _seed_item_history(db, mine.id)
    module = pg if db.dialect == "postgresql" else lite
    statement = module.LIST_FAILED_ITEMS if state is ItemState.FAILED else module.LIST_ITEMS
    params = {
        "job_id": mine.id,
        "tenant": None,
        "state": state.value if state else None,
        "after_index": -1,
        "limit": 51,
    }
    used = _item_plan(
        db, statement, {k: v for k, v in params.items() if f"%({k})s" in statement or f":{k}" in statement}
    )

    index = (
        "ix_job_items_failed"
        if state is ItemState.FAILED
        else ("pk_job_items" if db.dialect == "postgresql" else "sqlite_autoindex_job_items_1")
    )
    if db.dialect == "postgresql":
        assert used == [f"Index Scan {index}"], used
    else:
        assert len(used) == 1 and used[0].startswith(f"SEARCH job_items USING INDEX {index} (job_id=?"), used
