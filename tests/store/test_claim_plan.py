"""The claim's query plan on PostgreSQL: it reads the partial index of queued rows,
never the history, however long the history grows."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from service.jobs import Completion, NewJob
from service.limits import Limit
from service.store.postgres.heads import MARGIN_SECONDS
from service.store.postgres.statements import (
    CLAIM_JOBS,
    CLAIM_PLANNER,
    COMPLETE_JOBS,
    HAS_CLAIMABLE,
    KEY_LOOKUP_PLANNER,
)
from service.store.postgres.workflows import SETTLE_DEPENDENTS
from tests.analysts.synthetic import fill
from tests.conftest import Database, FakeClock
from tests.plans import explained, pg_plan_nodes, plan_nodes
from tests.store.builders import new_job

pytestmark = pytest.mark.postgres_only(reason="asserts PostgreSQL's query plan")


def _claim_params(**values: Any) -> dict[str, Any]:
    """Every parameter CLAIM_JOBS names: the given ones, NULL (or off) for the rest."""
    defaults: dict[str, Any] = {
        "now": None,
        "worker": "explain",
        "queues": ["default"],
        "kinds": None,
        "limit": 10,
        "lease_seconds": 30.0,
        "notify": False,
    }
    names = set(re.findall(r"%\((\w+)\)s", CLAIM_JOBS))
    return {name: values.get(name, defaults.get(name)) for name in names}


def _prepared(statement: str, values: dict[str, str]) -> tuple[str, str]:
    """The statement with $n for its named parameters, and its arguments (SQL literals) in that order."""
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", statement)))
    positional = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", statement).replace("%%", "%")
    return positional, ", ".join(values[name] for name in names)


def _prepare_generic(
    db: Database, name: str, statement: str, values: dict[str, str], *, setting: str | None = None
) -> tuple[str, Any]:
    """PREPARE ``statement`` as ``name`` and make its generic plan now (under ``setting``, a
    statement the store runs before it in its transaction), which the session then keeps;
    the arguments to EXECUTE it with, and that plan (EXPLAIN, not run)."""
    positional, arguments = _prepared(statement, values)
    db.execute("BEGIN")
    try:
        db.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        if setting is not None:
            db.execute(setting)
        db.execute(f"PREPARE {name} AS {positional}")
        [row] = db.rows(f"EXPLAIN (FORMAT JSON) EXECUTE {name}({arguments})")
    finally:
        db.execute("ROLLBACK")  # a prepared statement outlives its transaction
    return arguments, explained(row)


def _generic_plan(
    db: Database, statement: str, values: dict[str, str], *, setting: str | None = None
) -> tuple[list[dict[str, Any]], str]:
    """The nodes of the generic plan PostgreSQL makes for ``statement`` now, and the plan to show."""
    _arguments, plan = _prepare_generic(db, "generic", statement, values, setting=setting)
    db.execute("DEALLOCATE generic")
    return plan_nodes(plan[0]["Plan"]), json.dumps(plan, indent=1)


def test_the_claim_reads_only_the_claimable_index_however_long_the_history(make_store, store_url, db: Database):
    db.execute(
        """
        INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                          error, run_after, created_at, updated_at, finished_at)
        SELECT gen_random_uuid(), 't' || (g % 50), 'default', 'resize', '{}'::jsonb,
               (ARRAY['succeeded', 'succeeded', 'succeeded', 'failed', 'cancelled'])[1 + g % 5],
               g % 10, 1, 3,
               CASE WHEN g % 5 = 3 THEN 'boom' END,
               ts, ts, ts, ts
        FROM generate_series(1, 50000) AS g,
             LATERAL (SELECT now() - make_interval(secs => g * 10) AS ts) AS t
        """
    )
    make_store(store_url).enqueue_many([new_job(priority=i % 3) for i in range(20)])
    db.execute("ANALYZE jobs")

    for kinds in (None, ["resize"]):
        # EXPLAIN without ANALYZE plans the claim but does not run it: nothing is claimed.
        nodes, plan = pg_plan_nodes(db, CLAIM_JOBS, _claim_params(kinds=kinds))
        shown = json.dumps(plan, indent=1)

        index_scans = {n.get("Index Name") for n in nodes if n.get("Relation Name") == "jobs"}
        assert "ix_jobs_claimable" in index_scans, f"kinds={kinds}: the claim does not use ix_jobs_claimable\n{shown}"
        seq_scans = [n for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs"]
        assert not seq_scans, f"kinds={kinds}: the claim scans the whole jobs table\n{shown}"
    assert db.count("jobs", "state = 'queued'") == 20


def test_completion_finds_rows_by_index_in_a_plan_prepared_while_tables_are_small(make_store, store_url, db: Database):
    """A worker's connection prepares COMPLETE_JOBS after a few batches — on a new deployment,
    while jobs and job_attempts are nearly empty — and keeps that generic plan as the tables grow
    (nothing replans it until an ANALYZE). The plan must find rows by their keys: one that reads
    a table whole makes every batch slower than the last, and one that reads a set of rows again
    for each row of another (a Materialize inside a nested loop) makes a wide release quadratic.
    The store runs it behind KEY_LOOKUP_PLANNER, as it plans here."""
    store = make_store(store_url)
    store.enqueue_many([new_job() for _ in range(50)])
    store.complete_many([Completion(job.lease, None) for job in store.claim("w", ["default"], 50, 30)])
    values = {"now": "NULL", "batch": "'[]'", "items": "'[]'", "notify": "false", "recheck": "true"}
    _assert_found_by_key(*_generic_plan(db, COMPLETE_JOBS, values, setting=KEY_LOOKUP_PLANNER), "COMPLETE_JOBS")


def test_settling_dependents_finds_rows_by_index_in_a_plan_prepared_while_tables_are_small(
    make_store, store_url, db: Database
):
    """SETTLE_DEPENDENTS, as COMPLETE_JOBS: by key only, whatever the size of the graph."""
    store = make_store(store_url)
    store.enqueue_many([new_job(), *(new_job(depends_on=(0,)) for _ in range(20))])
    values = {"now": "NULL", "ids": "ARRAY[]::uuid[]", "notify": "false"}
    _assert_found_by_key(*_generic_plan(db, SETTLE_DEPENDENTS, values, setting=KEY_LOOKUP_PLANNER), "SETTLE_DEPENDENTS")


def _assert_found_by_key(nodes: list[dict[str, Any]], shown: str, name: str) -> None:
    scanned = [n for n in nodes if n.get("Relation Name") in ("jobs", "job_attempts", "job_items", "job_edges")]
    assert scanned, shown
    for node in scanned:
        assert node["Node Type"] != "Seq Scan", f"{name} reads all of {node['Relation Name']}\n{shown}"
    assert not [n for n in nodes if n["Node Type"] == "Materialize"], f"{name} reads a set once per row\n{shown}"


def _claim_values() -> dict[str, str]:
    return {
        "now": "NULL",
        "worker": "'explain'",
        "queues": "ARRAY['default']",
        "kinds": "NULL",
        "limit": "10",
        "lease_seconds": "30.0",
        "notify": "false",
        "cursor": "''",
        "visit": "11",
        "kind_max_attempts": "'{}'",
        "hint_queues": "NULL",
        "hint_tenants": "NULL",
        "hint_priorities": "NULL",
        "hint_run_afters": "NULL",
    }


@pytest.mark.parametrize(
    ("limited", "analysed"),
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["no limits", "a tenant limit", "no limits, analysed", "a tenant limit, analysed"],
)
def test_the_claim_finds_rows_by_key_in_a_plan_prepared_while_tables_are_small(
    make_store, store_url, db: Database, limited: bool, analysed: bool
):
    """PostgreSQL runs the claim on a generic plan (its parameters are read through ``n``, so a
    plan for given values looks no cheaper), made once per connection — on a new deployment,
    while jobs and scope_counters are small, never analysed or analysed — and kept as they
    grow. With CLAIM_PLANNER before it, as the store runs it, no read of those tables is a
    sequential scan. How many rows each read takes, on the plan kept as the queue grows, is
    the next test's."""
    store = make_store(store_url)
    if limited:
        store.set_limit(Limit("tenant:t1", concurrency=3))
    store.enqueue_many([new_job(tenant="t1") for _ in range(1_000 if analysed else 20)])
    if analysed:
        db.execute("ANALYZE")
    nodes, shown = _generic_plan(db, CLAIM_JOBS, _claim_values(), setting=CLAIM_PLANNER)
    scanned = [n for n in nodes if n.get("Relation Name") in ("jobs", "scope_counters")]
    assert scanned, shown
    for node in scanned:
        assert node["Node Type"] != "Seq Scan", f"CLAIM_JOBS reads all of {node['Relation Name']}\n{shown}"
    [update] = [n for n in nodes if n.get("Operation") == "Update" and n.get("Relation Name") == "jobs"]
    found = [n for n in plan_nodes(update) if n.get("Relation Name") == "jobs" and n is not update]
    assert [n.get("Index Name") for n in found] == ["pk_jobs"], f"the claimed rows are not found by key\n{shown}"


def test_postgresql_keeps_one_generic_plan_for_the_claim(make_store, store_url, db: Database):
    """Planning the claim costs as much as running it (docs/PERFORMANCE.md): a plan for given
    values must not look cheaper than the generic one, or PostgreSQL plans it before every run."""
    store = make_store(store_url)
    store.enqueue_many([new_job(tenant=f"t{i % 3}") for i in range(200)])
    positional, arguments = _prepared(CLAIM_JOBS, _claim_values())
    db.execute(f"PREPARE claim_jobs AS {positional}")
    try:
        for _ in range(12):  # 10 jobs each, of the 200
            assert len(db.rows(f"EXECUTE claim_jobs({arguments})")) == 10
        plans = db.one("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'claim_jobs'")
    finally:
        db.execute("DEALLOCATE claim_jobs")
    # PostgreSQL makes five custom plans, then compares: from then on the generic one is used.
    assert plans["custom_plans"] == 5 and plans["generic_plans"] == 7, plans


@pytest.mark.parametrize(
    ("prepared_at", "limited"),
    [(20, False), (1_000, False), (1_000, True)],
    ids=["planned on 20 queued", "planned on 1,000 queued", "planned on 1,000 queued, a tenant limit"],
)
def test_the_claim_reads_no_more_of_a_tenants_line_than_it_takes(
    make_store, store_url, db: Database, prepared_at: int, limited: bool
):
    """A claim of 10 from a tenant with 3,000 queued jobs reads 10 of them, on the generic plan a
    connection made when the queue was shorter and analysed, and kept as the queue grew. Planned
    with sequential scans off alone, as the store first did, the claim read the tenant's
    whole line by a bitmap scan and sorted it, and found the ten claimed rows again by hashing
    every job: 7 ms at 1,000 queued, growing with the backlog."""
    store = make_store(store_url)
    if limited:
        store.set_limit(Limit("tenant:t1", concurrency=50))
    store.enqueue_many([new_job(tenant="t1") for _ in range(prepared_at)])
    db.execute("ANALYZE")
    grown = [new_job(tenant="t1") for _ in range(3_000 - prepared_at)]
    plan = _kept_plan_run(store, db, _claim_values(), then_enqueued=grown)
    _assert_claimed_reading_at_most(plan, claimed=10, rows=20)


def test_the_claim_reads_one_queued_row_to_take_one_beside_a_long_history(make_store, store_url, db: Database):
    """Beside weeks of history (the analysts' synthetic one: many queues, tenants and states) the
    planner guesses a queue's line at one row. Joined to ``n`` in ``cand``, that line came out of
    the index unordered, and was read whole and sorted to take one job (1,000 rows; claims of
    3-4 ms beside 2.1 M jobs, against 1.6 once ``cand`` read the clock as ``picked`` does)."""
    fill(store_url, jobs=20_000, days=42, end=db.one("SELECT now() AS now")["now"])
    store = make_store(store_url)
    store.enqueue_many([new_job(queue="bench") for _ in range(1_000)])
    db.execute("ANALYZE")
    values = {**_claim_values(), "queues": "ARRAY['bench']", "limit": "1"}
    plan = _kept_plan_run(store, db, values, then_enqueued=[])
    _assert_claimed_reading_at_most(plan, claimed=1, rows=3)


def test_jobs_waiting_for_parents_cost_the_claim_nothing(make_store, store_url, db: Database):
    """Workflows: 2,000 jobs held by an unfinished parent in one tenant, due jobs in another.
    The held jobs are not in ix_jobs_claimable (``parents_pending = 0`` is in its predicate), so
    the claim reads as few rows as without them. Inside the index (the first design: held by a
    far run_after alone), the claim's tenant walk read through every held entry of their tenant:
    24,534 buffers and 45 ms a claim beside 10,000 held, against 100 and 6 ms."""
    store = make_store(store_url)
    parent = store.enqueue(new_job(tenant="a", queue="elsewhere"))
    store.enqueue_many([new_job(tenant="a", depends_on=(parent.id,)) for _ in range(2_000)])
    store.enqueue_many([new_job(tenant="b") for _ in range(100)])
    db.execute("ANALYZE")
    plan = _kept_plan_run(store, db, {**_claim_values(), "limit": "1"}, then_enqueued=[])
    _assert_claimed_reading_at_most(plan, claimed=1, rows=3)


def test_behind_a_pinned_horizon_the_claim_reads_the_claimed_jobs_entries_once(make_store, store_url, db: Database):
    """A session idle in transaction pins the xmin horizon; 1,500 jobs are claimed and finished
    behind it. Their old row versions, and so their entries in ix_jobs_claimable, must stay
    (that session may still read them): the first 1,500 entries of the line, each a heap visit
    to a scan that passes them. The claim, on the plan a worker keeps, passes them once (the
    walk's probe for the tenant's first due job); ``cand`` and ``picked`` start at that job,
    and a lone tenant's running jobs (ix_jobs_running, every job finished since) are not
    counted. Before: three scans of the dead entries and the count, 15,786 buffers a claim
    after 100,000 jobs against 10,845 and then ~3,600 (docs/PERFORMANCE.md, "bloat")."""
    store = make_store(store_url)
    store.enqueue_many([new_job() for _ in range(1_600)])
    db.execute("ANALYZE")
    with _pinned_horizon(store_url):
        _claimed_and_finished(store, batches=15)
        plan = _generic_plan_run(db, {**_claim_values(), "cursor": "'default'"})
    shown = json.dumps(plan, indent=1)
    assert plan[0]["Plan"]["Actual Rows"] == 10, shown
    lines = [n for n in plan_nodes(plan[0]["Plan"]) if n.get("Index Name") == "ix_jobs_claimable"]
    passes = [n for n in lines if _buffers(n) > 20]
    assert len(passes) == 1 and "tenant >" in passes[0]["Index Cond"], f"the dead entries are read again\n{shown}"
    running = [n for n in plan_nodes(plan[0]["Plan"]) if n.get("Index Name") == "ix_jobs_running"]
    assert all(n["Actual Loops"] == 0 for n in running), f"a lone tenant's running jobs are counted\n{shown}"


def test_behind_a_pinned_horizon_a_claim_between_full_walks_starts_at_its_hint(make_store, store_url, db: Database):
    """As above, with jobs enqueued over 160 s: a claim with the hint the claims before it left
    (the head they took, less a second: service.store.postgres.heads) starts its walk there,
    and passes only the dead entries of that last second, not the 1,500 before."""
    clock = FakeClock(datetime.now(UTC) - timedelta(hours=1))
    store = make_store(store_url, clock=clock)
    for _ in range(16):
        store.enqueue_many([new_job() for _ in range(100)])
        clock.advance(10)
    db.execute("ANALYZE")
    with _pinned_horizon(store_url):
        last = _claimed_and_finished(store, batches=15)
        head = db.one("SELECT min(run_after) AS at FROM jobs WHERE id = ANY(%(ids)s)", ids=[j.id for j in last])["at"]
        hinted = {
            **_claim_values(),
            "cursor": "'default'",
            "hint_queues": "ARRAY['default']",
            "hint_tenants": "ARRAY['default']",
            "hint_priorities": "ARRAY[0]",
            "hint_run_afters": f"ARRAY['{head - timedelta(seconds=MARGIN_SECONDS)}'::timestamptz]",
        }
        full = _generic_plan_run(db, {**_claim_values(), "cursor": "'default'"})
        plan = _generic_plan_run(db, hinted)
    shown = json.dumps(plan, indent=1)
    assert plan[0]["Plan"]["Actual Rows"] == 10, shown
    read = sum(_buffers(n) for n in plan_nodes(plan[0]["Plan"]) if n.get("Index Name") == "ix_jobs_claimable")
    read_full = sum(_buffers(n) for n in plan_nodes(full[0]["Plan"]) if n.get("Index Name") == "ix_jobs_claimable")
    # Buffers count heap pages, not entries: the 1,500 dead entries sit on some 60 pages, which a
    # full walk visits (71 buffers in all here) and the hinted one does not (25: the live head's).
    assert read_full >= 60, json.dumps(full, indent=1)
    assert read <= read_full / 2, (
        f"the hinted walk read {read} buffers of ix_jobs_claimable (full: {read_full})\n{shown}"
    )


def test_behind_a_pinned_horizon_the_idle_poll_passes_no_dead_entry_of_a_hinted_line(
    make_store, store_url, db: Database
):
    """The idle poll reads a hinted line from its hint and every other tenant whole, a range
    between hinted lines at a time: behind a pin, the 1,500 jobs claimed since stay in the
    line's first entries, and the poll passes none of them. Before, each poll whose hinted lines
    had nothing due read the queue from its start (4,607 buffers, 27 ms, after 150 s pinned at
    800 jobs/s), and it read ix_jobs_due to do it. Like the claim, it keeps to its index beside
    another index of queued rows (made here: migration 0017 dropped ix_jobs_due)."""
    db.execute("CREATE INDEX ix_jobs_queued_by_kind ON jobs (queue, kind, run_after) WHERE state = 'queued'")
    clock = FakeClock(datetime.now(UTC) - timedelta(hours=1))
    store = make_store(store_url, clock=clock)
    for _ in range(15):
        store.enqueue_many([new_job(tenant="acme") for _ in range(100)])
        clock.advance(10)
    db.execute("ANALYZE")
    with _pinned_horizon(store_url):
        last = _claimed_and_finished(store, batches=15)
        # the line is empty: its hint lies past its last job
        head = db.one("SELECT max(run_after) AS at FROM jobs WHERE id = ANY(%(ids)s)", ids=[j.id for j in last])["at"]
        store.enqueue(new_job(tenant="zeta"))
        db.execute("ANALYZE")
        poll = {
            "now": "NULL",
            "kinds": "NULL",
            "hint_queues": "ARRAY['default']",
            "hint_tenants": "ARRAY['acme']",
            "hint_priorities": "ARRAY[0]",
            "hint_run_afters": f"ARRAY['{head - timedelta(seconds=MARGIN_SECONDS)}'::timestamptz]",
            "gap_queues": "ARRAY['default', 'default']",
            "gap_afters": "ARRAY['', 'acme']",
            "gap_befores": "ARRAY['acme', NULL]",
        }
        arguments, _plan = _prepare_generic(db, "poll", HAS_CLAIMABLE, poll, setting=CLAIM_PLANNER)
        try:
            [row] = db.rows(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE poll({arguments})")
        finally:
            db.execute("DEALLOCATE poll")
        # and the poll of every line from its start, once a full-walk period, which passes them all
        whole = {**poll, "gap_queues": "ARRAY['default']", "gap_afters": "ARRAY['']", "gap_befores": "ARRAY[NULL]"}
        for empty in ("hint_queues", "hint_tenants"):
            whole[empty] = "ARRAY[]::text[]"
        whole.update({"hint_priorities": "ARRAY[]::int[]", "hint_run_afters": "ARRAY[]::timestamptz[]"})
        full_nodes, full_shown = _generic_plan(db, HAS_CLAIMABLE, whole, setting=CLAIM_PLANNER)
    plan = explained(row)
    shown = json.dumps(plan, indent=1)
    nodes = plan_nodes(plan[0]["Plan"])
    assert {n.get("Index Name") for n in nodes if n.get("Relation Name") == "jobs"} == {"ix_jobs_claimable"}, shown
    assert plan[0]["Plan"]["Shared Hit Blocks"] + plan[0]["Plan"].get("Shared Read Blocks", 0) <= 20, shown
    read_in_full = {n.get("Index Name") for n in full_nodes if n.get("Relation Name") == "jobs"}
    assert read_in_full == {"ix_jobs_claimable"}, full_shown


@contextmanager
def _pinned_horizon(store_url: str) -> Iterator[None]:
    """A session idle in a REPEATABLE READ transaction: its snapshot keeps every row version
    that dies while the block runs (nothing claimed from here on can be cleaned up)."""
    with psycopg.connect(store_url, autocommit=True) as pin:
        pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pin.execute("SELECT 1")
        yield


def _claimed_and_finished(store: Any, *, batches: int) -> list[Any]:
    """``batches`` claims of 100, each completed; the jobs of the last one."""
    last: list[Any] = []
    for _ in range(batches):
        last = store.claim("w", ["default"], 100, 30)
        store.complete_many([Completion(job.lease, None) for job in last])
    return last


def _buffers(node: dict[str, Any]) -> int:
    return int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))


def _generic_plan_run(db: Database, values: dict[str, str]) -> Any:
    """EXPLAIN (ANALYZE, BUFFERS) of the claim on the generic plan made now under CLAIM_PLANNER,
    as a worker's connection keeps it (rolled back: nothing is claimed)."""
    arguments, _plan = _prepare_generic(db, "kept", CLAIM_JOBS, values, setting=CLAIM_PLANNER)
    try:
        db.execute("BEGIN")
        try:
            db.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            [row] = db.rows(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE kept({arguments})")
        finally:
            db.execute("ROLLBACK")
    finally:
        db.execute("DEALLOCATE kept")
    return explained(row)


def _kept_plan_run(store: Any, db: Database, values: dict[str, str], *, then_enqueued: list[NewJob]) -> Any:
    """EXPLAIN ANALYZE of the claim on the generic plan made now, run after ``then_enqueued``
    joined the queue (rolled back: nothing is claimed)."""
    arguments, _plan = _prepare_generic(db, "kept", CLAIM_JOBS, values, setting=CLAIM_PLANNER)
    try:
        store.enqueue_many(then_enqueued)
        db.execute("BEGIN")  # EXPLAIN ANALYZE runs the claim: rolled back below
        try:
            # the plan kept, without the setting it was made under (as a pool's connection would)
            db.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            [row] = db.rows(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE kept({arguments})")
        finally:
            db.execute("ROLLBACK")
        plans = db.one("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'kept'")
    finally:
        db.execute("DEALLOCATE kept")
    assert plans == {"generic_plans": 2, "custom_plans": 0}, plans  # the plan made before the growth ran
    return explained(row)


def _assert_claimed_reading_at_most(plan: Any, *, claimed: int, rows: int) -> None:
    shown = json.dumps(plan, indent=1)
    assert plan[0]["Plan"]["Actual Rows"] == claimed, shown
    for node in plan_nodes(plan[0]["Plan"]):
        if node.get("Relation Name") == "jobs" and "Scan" in node["Node Type"]:
            read = node["Actual Rows"] * node["Actual Loops"]
            assert read <= rows, f"{node['Node Type']} on {node.get('Index Name')} read {read} rows\n{shown}"


@pytest.mark.parametrize("limited", [False, True], ids=["no limits", "a tenant limit"])
def test_the_claim_planned_at_every_run_reads_no_more_of_a_line_than_it_takes(
    make_store, store_url, db: Database, limited: bool
):
    """Unprepared (JOBQ_PREPARE=off, or a pooler found), the claim is planned at every run for
    its values, under CLAIM_PLANNER in its transaction: the same plan shape as the generic one
    above, a tenant's line of 3,000 read 10 rows to take 10, and one row of a queue beside a long
    history read to take one. Then the store claims the same way, prepared nothing."""
    fill(store_url, jobs=20_000, days=42, end=db.one("SELECT now() AS now")["now"])
    store = make_store(store_url, prepare="off")
    if limited:
        store.set_limit(Limit("tenant:t1", concurrency=50))
    store.enqueue_many([new_job(tenant="t1") for _ in range(3_000)])
    store.enqueue_many([new_job(queue="bench") for _ in range(1_000)])
    db.execute("ANALYZE")

    plan = _planned_per_run(db, _claim_values())
    _assert_claimed_reading_at_most(plan, claimed=10, rows=20)
    nodes = plan_nodes(plan[0]["Plan"])
    shown = json.dumps(plan, indent=1)
    assert not [
        n for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") in ("jobs", "scope_counters")
    ], shown
    [update] = [n for n in nodes if n.get("Operation") == "Update" and n.get("Relation Name") == "jobs"]
    found = [n for n in plan_nodes(update) if n.get("Relation Name") == "jobs" and n is not update]
    assert [n.get("Index Name") for n in found] == ["pk_jobs"], f"the claimed rows are not found by key\n{shown}"

    beside_history = _planned_per_run(db, {**_claim_values(), "queues": "ARRAY['bench']", "limit": "1"})
    _assert_claimed_reading_at_most(beside_history, claimed=1, rows=3)

    assert len(store.claim("w", ["default"], 10, 30)) == 10
    assert db.count("pg_prepared_statements") == 0  # this session's; the store's prepare none either


def _planned_per_run(db: Database, values: dict[str, str]) -> Any:
    """EXPLAIN ANALYZE of the claim planned for ``values`` at this run, as an unprepared
    statement is, after CLAIM_PLANNER in its transaction (rolled back: nothing is claimed)."""
    positional, arguments = _prepared(CLAIM_JOBS, values)
    db.execute("BEGIN")
    try:
        db.execute(CLAIM_PLANNER)
        db.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        db.execute(f"PREPARE once AS {positional}")
        [row] = db.rows(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE once({arguments})")
    finally:
        db.execute("ROLLBACK")
        db.execute("DEALLOCATE once")  # a prepared statement outlives its transaction
    return explained(row)


def test_behind_a_pinned_horizon_the_claim_keeps_to_the_claimable_index_under_statistics_taken_there(
    make_store, store_url, db: Database
):
    """Autovacuum cannot clean behind a pinned horizon, but it does analyse, and every ANALYZE
    makes the worker's connections plan the claim again. Statistics taken there saw a drained
    queue (a few queued rows among thousands just finished): under them every probe of the claim
    looked like one row whichever index it read, and the plan read ix_jobs_due (queue, kind,
    run_after), which has no tenant or priority: each probe then read every entry of the queue,
    dead ones included, and sorted (250 ms a claim, 0.83x completions: docs/PERFORMANCE.md,
    "bloat"). Migration 0017 dropped that index; this test makes its like again (an operator's
    index, or a later migration's), because the claim must keep to its own whatever other index
    of queued rows exists: under CLAIM_PLANNER (no sorts) only ix_jobs_claimable gives the
    claim's order."""
    db.execute("CREATE INDEX ix_jobs_queued_by_kind ON jobs (queue, kind, run_after) WHERE state = 'queued'")
    clock = FakeClock(datetime.now(UTC) - timedelta(hours=1))
    store = make_store(store_url, clock=clock)
    with _pinned_horizon(store_url):
        for _ in range(40):
            store.enqueue_many([new_job() for _ in range(100)])
            clock.advance(1)
            store.complete_many([Completion(job.lease, None) for job in store.claim("w", ["default"], 100, 30)])
        store.enqueue_many([new_job() for _ in range(3)])
        db.execute("ANALYZE jobs")
        for values in (_claim_values(), {**_claim_values(), "cursor": "'default'"}):
            nodes, shown = _generic_plan(db, CLAIM_JOBS, values, setting=CLAIM_PLANNER)
            read = {n.get("Index Name") for n in nodes if n.get("Relation Name") == "jobs"}
            assert read <= {"ix_jobs_claimable", "ix_jobs_running", "pk_jobs", None}, f"{read}\n{shown}"
