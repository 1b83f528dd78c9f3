"""Limits and fair shares in the claim, on both stores: concurrency, rate, tenant:* defaults,
slots given back by every statement that ends a run, round robin and weights across tenants."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from service.errors import InvalidInput, LimitNotFound
from service.jobs import Completion, NewJob
from service.limits import Limit, parse_rate
from service.store import Store
from service.store.postgres.submit import COPY_FROM_JOBS
from tests.conftest import Database, FakeClock
from tests.store.builders import LEASE_SECONDS, fail_job, new_job, reap


def claim(store: Store, limit: int = 10, worker: str = "worker-a") -> list:
    return store.claim(worker, ["default"], limit, LEASE_SECONDS)


def running_in(store: Store, scope: str) -> int:
    [usage] = store.scope_usage([scope])
    return usage.running


def counters_match_running_jobs(store: Store, db: Database) -> None:
    """Every counter equals the running jobs it counts (no slot leaked, none counted twice)."""
    for usage in store.scope_usage():
        kind, _, name = usage.scope.partition(":")
        column = {"tenant": "tenant", "kind": "kind", "queue": "queue", "key": "concurrency_key"}[kind]
        actual = db.count("jobs", f"state = 'running' AND {column} = %(name)s", name=name)
        assert usage.running == actual, f"{usage.scope}: counter {usage.running}, running jobs {actual}"


def test_a_key_limit_caps_the_jobs_running_with_that_key(store, db):
    store.set_limit(Limit("key:gpu", concurrency=2))
    store.enqueue_many([new_job(concurrency_key="gpu") for _ in range(5)] + [new_job(concurrency_key="cpu")])

    first = claim(store)

    assert Counter(db.job(job.id)["concurrency_key"] for job in first) == {"gpu": 2, "cpu": 1}
    assert claim(store) == []
    gpu = next(job for job in first if db.job(job.id)["concurrency_key"] == "gpu")
    store.complete(gpu.lease, None)
    assert len(claim(store)) == 1, "the finished job's slot is free at once"
    assert running_in(store, "key:gpu") == 2
    counters_match_running_jobs(store, db)


@pytest.mark.parametrize("end", ["complete", "complete_many", "retry", "fail", "release", "cancel", "reap"])
def test_every_way_a_run_ends_gives_its_slot_back(store, db, clock: FakeClock, end: str):
    store.set_limit(Limit("kind:resize", concurrency=1))
    store.enqueue_many([new_job(), new_job()])
    [job] = claim(store)
    assert running_in(store, "kind:resize") == 1
    assert claim(store) == []

    if end == "complete":
        store.complete(job.lease, {"ok": True})
    elif end == "complete_many":
        assert store.complete_many([Completion(job.lease, None)]) == []
    elif end == "retry":
        fail_job(store, job, "ValueError: boom", retryable=True)
    elif end == "fail":
        fail_job(store, job, "ValueError: boom", retryable=False)
    elif end == "release":
        store.release(job.lease)
    elif end == "cancel":
        store.cancel(job.id)
        assert running_in(store, "kind:resize") == 1, "a cancel request alone frees nothing: the job still runs"
        store.acknowledge_cancel(job.lease)
    else:
        clock.advance(LEASE_SECONDS + 1)
        assert reap(store).requeued == 1

    assert running_in(store, "kind:resize") == 0
    assert len(claim(store)) == 1
    counters_match_running_jobs(store, db)


def test_a_lost_lease_gives_nothing_back_twice(store, db, clock: FakeClock):
    store.set_limit(Limit("kind:resize", concurrency=2))
    store.enqueue(new_job())
    [job] = claim(store)
    clock.advance(LEASE_SECONDS + 1)
    reap(store)
    clock.advance(3600)  # past the retry backoff
    [again] = claim(store)

    assert store.complete_many([Completion(job.lease, None)]) == [job.lease]  # the zombie's write matches nothing
    assert running_in(store, "kind:resize") == 1
    store.complete(again.lease, None)
    assert running_in(store, "kind:resize") == 0


def test_tenant_star_gives_each_tenant_its_own_limit_and_a_tenant_its_own_override(store, db):
    store.set_limit(Limit("tenant:*", concurrency=1))
    store.set_limit(Limit("tenant:big", concurrency=3))
    store.enqueue_many([new_job(tenant=tenant) for tenant in ("a", "b", "big") for _ in range(4)])

    taken = Counter(db.job(job.id)["tenant"] for job in claim(store, 20))

    assert taken == {"a": 1, "b": 1, "big": 3}
    assert {u.scope: u.running for u in store.scope_usage()} == {"tenant:a": 1, "tenant:b": 1, "tenant:big": 3}
    store.enqueue(new_job(tenant="late"))  # a tenant first seen after the limit was set
    assert [db.job(job.id)["tenant"] for job in claim(store, 20)] == ["late"]
    counters_match_running_jobs(store, db)


def test_a_limit_set_while_jobs_run_counts_them_and_a_deleted_one_frees_the_scope(store, db):
    store.enqueue_many([new_job() for _ in range(6)])
    assert len(claim(store, 3)) == 3

    store.set_limit(Limit("kind:resize", concurrency=3))
    assert running_in(store, "kind:resize") == 3
    assert claim(store) == []

    store.delete_limit("kind:resize")
    assert store.scope_usage() == []
    assert len(claim(store)) == 3
    with pytest.raises(LimitNotFound):
        store.delete_limit("kind:resize")


def test_a_lowered_limit_lets_nothing_start_until_the_scope_is_under_it(store):
    store.enqueue_many([new_job(concurrency_key="k") for _ in range(5)])
    running = claim(store, 3)
    store.set_limit(Limit("key:k", concurrency=1))

    store.complete(running[0].lease, None)
    assert claim(store) == [], "2 still run against a limit of 1"
    store.complete(running[1].lease, None)
    store.complete(running[2].lease, None)
    assert len(claim(store)) == 1


def test_a_queue_limit_and_a_concurrency_of_zero_pause_a_scope(store):
    store.set_limit(Limit("queue:default", concurrency=0))
    store.enqueue(new_job())
    assert claim(store) == []
    store.set_limit(Limit("queue:default", concurrency=5))
    assert len(claim(store)) == 1


def test_a_rate_limit_counts_starts_per_window(store, clock: FakeClock):
    rate, per = parse_rate("3/s")
    store.set_limit(Limit("kind:call_model", rate=rate, per_seconds=per))
    store.enqueue_many([new_job("call_model") for _ in range(8)])

    first = claim(store)
    assert len(first) == 3
    for job in first:
        store.complete(job.lease, None)  # finishing does not give a start back: starts are counted
    assert claim(store) == []
    clock.advance(1)
    assert len(claim(store)) == 3
    clock.advance(1)
    assert len(claim(store)) == 2


def test_a_lone_tenant_takes_every_free_slot(store):
    store.set_limit(Limit("tenant:*", weight=1.0))
    store.enqueue_many([new_job(tenant="solo") for _ in range(30)])
    assert len(claim(store, 25)) == 25


def test_a_late_tenant_is_not_stuck_behind_a_deep_one(store, db):
    store.enqueue_many([new_job(tenant="a", payload={"n": n}) for n in range(50)])
    store.enqueue_many([new_job(tenant="b", payload={"n": n}) for n in range(3)])

    starts = []
    for _ in range(6):
        [job] = claim(store, 1)
        starts.append(db.job(job.id)["tenant"])
        store.complete(job.lease, None)

    assert starts.count("b") == 3, starts


def test_a_tenant_with_fewer_running_jobs_goes_first(store, db):
    store.enqueue_many([new_job(tenant="a") for _ in range(10)])
    assert len(claim(store, 4)) == 4  # a holds 4 slots
    store.enqueue_many([new_job(tenant="b") for _ in range(10)])

    taken = Counter(db.job(job.id)["tenant"] for job in claim(store, 4))

    assert taken == {"b": 4}, "b (0 running) gets the free slots until it has as many as a"


def test_priority_orders_a_tenants_own_jobs_but_does_not_let_it_jump_other_tenants(store, db):
    store.enqueue_many([new_job(tenant="a", priority=p, payload={"p": p}) for p in (1, 5, 3)])
    store.enqueue_many([new_job(tenant="b", priority=1000, payload={"p": 1000 + n}) for n in range(3)])

    order = []
    for _ in range(6):
        [job] = claim(store, 1)
        row = db.job(job.id)
        order.append((row["tenant"], row["priority"]))
        store.complete(job.lease, None)

    assert [p for t, p in order if t == "a"] == [5, 3, 1]
    assert [t for t, _ in order] in (["a", "b"] * 3, ["b", "a"] * 3), order


def test_weights_split_the_starts(store, db):
    store.set_limit(Limit("tenant:heavy", weight=3))
    store.enqueue_many([new_job(tenant="heavy") for _ in range(100)] + [new_job(tenant="light") for _ in range(100)])

    taken: Counter[str] = Counter()
    for _ in range(20):
        batch = claim(store, 4)
        taken.update(db.job(job.id)["tenant"] for job in batch)
        store.complete_many([Completion(job.lease, None) for job in batch])

    assert taken == {"heavy": 60, "light": 20}


def test_limits_are_listed_per_tenant(store):
    store.set_limit(Limit("tenant:*", concurrency=2))
    store.set_limit(Limit("tenant:acme", concurrency=5, weight=2))
    store.set_limit(Limit("tenant:other", concurrency=1))
    rate, per = parse_rate("60/min")
    store.set_limit(Limit("kind:call_model", rate=rate, per_seconds=per))

    scopes = [limit.scope for limit in store.list_limits()]
    assert scopes == ["kind:call_model", "tenant:*", "tenant:acme", "tenant:other"]
    mine = [Limit("tenant:*", concurrency=2), Limit("tenant:acme", concurrency=5, weight=2)]
    assert store.list_limits("acme") == mine
    assert store.list_limits()[0].rate_text == "60/min"


@pytest.mark.parametrize(
    "bad",
    [
        lambda: Limit("tenant", concurrency=1),
        lambda: Limit("user:x", concurrency=1),
        lambda: Limit("kind:*", concurrency=1),
        lambda: Limit("kind: x", concurrency=1),
        lambda: Limit("kind:x", concurrency=-1),
        lambda: Limit("kind:x", weight=2),
        lambda: Limit("tenant:x", weight=0),
        lambda: Limit("tenant:x"),
        lambda: parse_rate("20/fortnight"),
        lambda: parse_rate("0/s"),
    ],
)
def test_bad_limits_are_refused_by_name(bad):
    with pytest.raises(InvalidInput):
        bad()


def test_a_bad_scope_is_refused_by_the_store(store):
    with pytest.raises(InvalidInput):
        store.delete_limit("nonsense")


@pytest.mark.postgres_only(reason="many claimers at once: SQLite has one writer")
def test_claimers_racing_never_put_a_scope_over_its_limit(make_store, store_url, db):
    setup = make_store(store_url)
    setup.set_limit(Limit("key:k", concurrency=3))
    stores = [make_store(store_url) for _ in range(8)]
    for _round in range(5):
        setup.enqueue_many([new_job(concurrency_key="k") for _ in range(20)])
        start = threading.Barrier(len(stores))
        taken: list[int] = []

        def race(store: Store, start: threading.Barrier = start, taken: list[int] = taken) -> None:
            start.wait()
            taken.append(len(store.claim(f"w{id(store)}", ["default"], 2, LEASE_SECONDS)))

        threads = [threading.Thread(target=race, args=(s,)) for s in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(taken) == 3, taken
        assert db.count("jobs", "state = 'running'") == 3
        counters_match_running_jobs(setup, db)
        db.execute("UPDATE scope_counters SET running = 0")
        db.execute("UPDATE jobs SET state = 'cancelled', finished_at = updated_at WHERE state <> 'cancelled'")


@pytest.mark.parametrize("size", [1, COPY_FROM_JOBS], ids=["one", "copied"])
def test_enqueued_jobs_of_a_new_tenant_get_a_counter_under_tenant_star(store, size: int):
    store.set_limit(Limit("tenant:*", concurrency=2))
    store.enqueue_many([NewJob(kind="k", payload={}, tenant=("fresh", "new")[i % 2]) for i in range(size)])
    expected = [("tenant:fresh", 0, 2), ("tenant:new", 0, 2)][: min(size, 2)]
    assert [(u.scope, u.running, u.concurrency) for u in store.scope_usage()] == expected
