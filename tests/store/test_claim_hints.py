"""Claims between full walks (PostgreSQL's line hints, service.store.postgres.heads) take what
a full walk would, with one bounded exception; SQLite walks in full every time, and the same
tests hold there."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from service.limits import Limit
from service.store.postgres.heads import FULL_WALK_SECONDS, FULL_WALK_SHARE, KEEP_SECONDS, MARGIN_SECONDS, LineHeads
from service.store.postgres.statements import CLAIM_JOBS
from service.store.postgres.workflows import ENQUEUE_DEPENDENTS
from service.store.schema import HELD_UNTIL_PG
from service.workflows import HELD_UNTIL
from tests.conftest import FakeClock
from tests.store.builders import LEASE_SECONDS, claim_one, new_job


def test_a_higher_priority_job_enqueued_after_a_claim_is_taken_by_the_next_claim(store):
    store.enqueue_many([new_job("routine") for _ in range(5)])
    claim_one(store)  # its line's hint: priority 0

    urgent = store.enqueue(new_job("urgent", priority=9))

    assert claim_one(store).id == urgent.id


def test_a_new_tenant_is_seen_by_the_next_claim_beside_a_hinted_one(store):
    store.enqueue_many([new_job(tenant="acme") for _ in range(5)])
    claim_one(store)  # a hint for acme's line

    newcomer = store.enqueue(new_job(tenant="zeta"))
    before = store.enqueue(new_job(tenant="abc"))  # sorts before acme

    claimed = {job.id for job in store.claim("worker-a", ["default"], 10, LEASE_SECONDS)}
    assert {newcomer.id, before.id} <= claimed


def test_jobs_enqueued_one_after_another_are_all_claimed_in_order(store, clock: FakeClock):
    taken = []
    for n in range(5):
        job = store.enqueue(new_job(payload={"n": n}))
        clock.advance(0.01)
        taken.append((job.id, claim_one(store).id))
    assert all(enqueued == claimed for enqueued, claimed in taken)


def test_a_job_due_long_before_the_lines_head_is_claimed_within_the_full_walk_period(store, clock: FakeClock):
    # A run_after an hour before the line's head lies below the hint the last claim left: a
    # claim between full walks may pass it by, the next full walk takes it.
    store.enqueue_many([new_job("routine") for _ in range(50)])
    claim_one(store)
    late = store.enqueue(new_job("backdated", run_after=clock.now() - timedelta(hours=1)))

    started = time.monotonic()
    while not any(job.id == late.id for job in store.claim("worker-a", ["default"], 1, LEASE_SECONDS)):
        assert time.monotonic() - started < FULL_WALK_SECONDS + 1.0, "the backdated job was not claimed"
        time.sleep(0.05)


def test_the_idle_poll_sees_a_new_tenant_and_a_higher_priority_beside_a_hinted_line(store):
    store.enqueue_many([new_job(tenant="acme") for _ in range(2)])
    claim_one(store)
    claim_one(store)  # acme's line is hinted, and empty
    assert not store.has_claimable(["default"])

    store.enqueue(new_job(tenant="abc"))  # sorts before acme
    assert store.has_claimable(["default"])
    claim_one(store)
    store.enqueue(new_job(tenant="zeta"))  # after it
    assert store.has_claimable(["default"])
    claim_one(store)
    store.enqueue(new_job(tenant="acme", priority=9))
    assert store.has_claimable(["default"])
    assert not store.has_claimable(["default"], ["another-kind"])


def test_the_idle_poll_sees_a_job_due_long_before_the_lines_head_within_the_full_walk_period(store, clock: FakeClock):
    store.enqueue_many([new_job("routine") for _ in range(2)])
    claim_one(store)
    claim_one(store)
    late = store.enqueue(new_job("backdated", run_after=clock.now() - timedelta(hours=1)))

    started = time.monotonic()
    while not store.has_claimable(["default"]):
        assert time.monotonic() - started < FULL_WALK_SECONDS + 1.0, "the poll did not see the backdated job"
        time.sleep(0.05)
    assert claim_one(store).id == late.id  # the claim after that poll walks in full


# -- the hints themselves ----------------------------------------------------------------------


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def claimed_row(tenant: str, head_priority: int, head_run_after: datetime) -> dict[str, object]:
    """A row as CLAIM_JOBS returns it: a job taken, with the head its line had in that claim."""
    return {"queue": "default", "tenant": tenant, "head_priority": head_priority, "head_run_after": head_run_after}


def test_the_first_claim_and_one_every_full_walk_period_walk_every_line():
    ticks = Ticks()
    heads = LineHeads(clock=ticks)
    at = datetime(2030, 1, 1, tzinfo=UTC)

    assert heads.params()["hint_tenants"] == []
    heads.learn([claimed_row("acme", 0, at)])
    assert heads.params()["hint_tenants"] == ["acme"]
    ticks.now += FULL_WALK_SECONDS
    assert heads.params()["hint_tenants"] == []  # a full walk
    heads.learn([claimed_row("zeta", 0, at)])  # which took jobs: the hints start afresh from its heads
    assert heads.params()["hint_tenants"] == ["zeta"]


def test_a_full_walk_that_takes_nothing_leaves_the_hints_as_they_were():
    ticks = Ticks()
    heads = LineHeads(clock=ticks)
    at = datetime(2030, 1, 1, tzinfo=UTC)
    heads.params()
    heads.learn([claimed_row("acme", 0, at)])

    ticks.now += FULL_WALK_SECONDS
    assert heads.params()["hint_tenants"] == []
    heads.learn([])  # other workers emptied the line: acme's hint is still below all of it

    assert heads.params()["hint_tenants"] == ["acme"]


def test_a_hint_not_learned_again_is_dropped_at_the_first_full_walk_after_its_keep():
    ticks = Ticks()
    heads = LineHeads(clock=ticks)
    at = datetime(2030, 1, 1, tzinfo=UTC)
    heads.params()
    heads.learn([claimed_row("acme", 0, at), claimed_row("zeta", 0, at)])

    ticks.now += KEEP_SECONDS - FULL_WALK_SECONDS / 2
    heads.params()  # a full walk that takes nothing
    heads.learn([])
    ticks.now += FULL_WALK_SECONDS / 4
    assert heads.params()["hint_tenants"] == ["acme", "zeta"]  # a claim between full walks
    heads.learn([claimed_row("zeta", 0, at)])
    ticks.now += FULL_WALK_SECONDS
    assert heads.params()["hint_tenants"] == []  # the next full walk, which takes nothing either
    heads.learn([])
    assert heads.params()["hint_tenants"] == ["zeta"]


def test_the_idle_poll_reads_the_tenants_between_hinted_lines_each_range_whole():
    heads = LineHeads(clock=Ticks())
    at = datetime(2030, 1, 1, tzinfo=UTC)
    heads.params()
    heads.learn([claimed_row("acme", 0, at), claimed_row("zeta", 0, at)])

    lines = heads.poll(["default", "ocr"])

    assert lines["hint_tenants"] == ["acme", "zeta"]
    assert list(zip(lines["gap_queues"], lines["gap_afters"], lines["gap_befores"], strict=True)) == [
        ("default", "", "acme"),
        ("default", "acme", "zeta"),
        ("default", "zeta", None),
        ("ocr", "", None),
    ]


def test_the_idle_poll_reads_every_line_from_its_start_once_a_period_and_a_find_there_makes_a_full_walk():
    ticks = Ticks()
    heads = LineHeads(clock=ticks)
    at = datetime(2030, 1, 1, tzinfo=UTC)
    heads.params()
    heads.learn([claimed_row("acme", 0, at)])
    probed: list[dict[str, object]] = []

    def finds(lines: dict[str, object]) -> bool:
        probed.append(lines)
        return True

    assert heads.poll_in_full(["default"], finds)
    assert probed == [
        {
            "hint_queues": [],
            "hint_tenants": [],
            "hint_priorities": [],
            "hint_run_afters": [],
            "gap_queues": ["default"],
            "gap_afters": [""],
            "gap_befores": [None],
        }
    ]
    assert heads.params()["hint_tenants"] == []  # the job lies below a hint: the next claim walks in full
    heads.learn([claimed_row("acme", 0, at)])
    assert not heads.poll_in_full(["default"], finds)  # not again within the period
    ticks.now += FULL_WALK_SECONDS
    assert heads.poll_in_full(["default"], finds)
    assert len(probed) == 2


def test_a_slow_full_walk_makes_the_next_one_wait_for_its_share_of_the_time():
    ticks = Ticks()
    heads = LineHeads(clock=ticks)
    at = datetime(2030, 1, 1, tzinfo=UTC)

    assert heads.params()["hint_tenants"] == []  # a full walk, which takes 70 ms
    ticks.now += 0.07
    heads.learn([claimed_row("acme", 0, at)])
    ticks.now += FULL_WALK_SECONDS
    assert heads.params()["hint_tenants"] == ["acme"]  # a second on: still hinted
    ticks.now = 100.0 + 0.07 / FULL_WALK_SHARE
    assert heads.params()["hint_tenants"] == []


def test_a_lines_hint_is_the_head_its_claim_found_less_the_margin():
    heads = LineHeads(clock=Ticks())
    at = datetime(2030, 1, 1, tzinfo=UTC)
    heads.params()

    heads.learn([claimed_row("acme", 5, at), claimed_row("acme", 5, at), claimed_row("zeta", 0, at)])

    params = heads.params()
    assert params["hint_tenants"] == ["acme", "zeta"]
    assert params["hint_priorities"] == [5, 0]
    assert params["hint_run_afters"] == [at - timedelta(seconds=MARGIN_SECONDS)] * 2


def test_a_job_held_back_by_a_limit_keeps_the_lines_hint_below_it(store, clock: FakeClock):
    # The line's head is the job a full concurrency key holds back, not the job taken after it
    # ten seconds later: once the key has room, the next claim takes the held job, hinted or not.
    store.set_limit(Limit(scope="key:k", concurrency=1))
    first = store.enqueue(new_job("first", concurrency_key="k"))
    second = store.enqueue(new_job("second", concurrency_key="k"))
    running = claim_one(store)
    assert running.id == first.id
    clock.advance(10)
    later = store.enqueue(new_job("later"))
    assert claim_one(store).id == later.id  # the key is full: the line's head, second, waits

    store.complete(running.lease, None)

    assert claim_one(store).id == second.id


def test_the_held_until_literal_is_one_instant_in_the_schema_the_sql_and_the_domain():
    # ix_jobs_claimable's predicate (schema.py) must be provable from the claim's own literal
    # (the SQL fragment held_until), and both must be the run_after a waiting job is written with.
    assert HELD_UNTIL_PG == f"'{HELD_UNTIL}+00'::timestamptz"
    assert HELD_UNTIL_PG in CLAIM_JOBS and HELD_UNTIL_PG in ENQUEUE_DEPENDENTS
