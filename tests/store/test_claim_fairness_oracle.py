"""PostgreSQL's fair claim (CLAIM_JOBS, one statement) against ``fairness.choose``, the
SQLite claim's pick in Python, as the oracle.

Hypothesis draws tenants (a-d), jobs of two kinds in two queues with or without a
concurrency key and with priorities, jobs another worker already runs, and up to four
limits on tenant:NAME, tenant:*, kind:, queue: and key: scopes (concurrency 0-3, a rate
of 1-3 a minute, a tenant weight of 0.5, 2 or 3); then one or two claims of 1-5 slots by
a fresh store. Before each claim the oracle is built from what the store reads
(``scope_usage``, ``list_limits``) and what the test enqueued: the tenants with due jobs
walked in name order from the store's cursor, the first ``limit + 1`` with room visited,
each tenant's line (priority, then age, then id; jobs in a full kind/queue/key scope left
out) cut at ``limit``, each job's virtual time (tenant's running + place) / weight. Then:

1. **No scope goes over its limit**, always: in every scope the claim takes at most the
   room the scope had (a tenant without a counter while tenant:* limits: none).
2. **The tenants' shares are never exceeded**, always: every job PostgreSQL takes is in
   ``choose`` of the candidates judged by the tenant scopes alone (the weighted shares).
3. **Exactly the oracle's jobs** — the same set, so the same tenants, per-tenant counts
   and, within each tenant, the same best jobs of its line — whenever the kind, queue and
   key limits do not change the oracle's pick (``choose`` with every room equals
   ``choose`` with the tenant rooms alone), which is every claim that no such limit binds.

Why 3 is not asserted for every claim: the two picks differ, by design of the statement,
where a kind/queue/key limit has less room than the fair shares put in it. PostgreSQL
sizes the shares by virtual time and tenant room only, locks them, and then admits each
limited scope's picked jobs by their place in their tenant's line (``placed``), counting
refused jobs too; ``choose`` walks by virtual time and skips a job whose scope is full,
going on to the next. So PostgreSQL can (a) leave a slot idle for one claim while a job
of another kind waits beyond the shares, and (b) give a contested scope's last slot to
the tenant whose job is first in its own line rather than to the one with the lower
virtual time; it can also take *more* than the greedy ``choose`` (a job in two scopes
that blocks two others), so no count bound holds either way. The smallest examples are
the two xfail tests at the end; within a claim that no such limit binds the two agree
exactly, and 2 bounds what PostgreSQL may take otherwise.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from service.jobs import NewJob
from service.limits import Limit, job_scopes
from service.store import Store
from service.store.fairness import Candidate, advance_cursor, choose, tenants_to_visit
from tests.conftest import Database, FakeClock, build_store

TENANTS = ("a", "b", "c", "d")
KINDS = ("k1", "k2")
QUEUES = ("q1", "q2")
KEYS = (None, "g1", "g2")
SCOPES = (
    *(f"tenant:{t}" for t in TENANTS),
    "tenant:*",
    *(f"kind:{k}" for k in KINDS),
    *(f"queue:{q}" for q in QUEUES),
    "key:g1",
    "key:g2",
)
LEASE_SECONDS = 60.0
TABLES_CHILD_FIRST = ("job_replays", "job_attempts", "job_results", "jobs", "scope_counters", "limits")


@dataclass(frozen=True)
class Job:
    tenant: str
    kind: str
    queue: str = "q1"
    key: str | None = None
    priority: int = 0

    @property
    def scopes(self) -> list[str]:
        return job_scopes(self.tenant, self.kind, self.queue, self.key)

    def new(self) -> NewJob:
        return NewJob(
            kind=self.kind, queue=self.queue, tenant=self.tenant, concurrency_key=self.key, priority=self.priority
        )


@dataclass(frozen=True)
class Queued:
    """A waiting job as the test knows it: what a tenant's line is ordered by."""

    id: uuid.UUID
    job: Job
    run_after: datetime


@dataclass(frozen=True)
class Oracle:
    """The claim's inputs as ``choose`` takes them, and its two answers."""

    candidates: list[Candidate]
    rooms: dict[str, int | None]
    every_tenant_limited: bool
    fair: list[Candidate]  # choose by every scope's room: the claim DESIGN.md describes
    shares: list[Candidate]  # choose by the tenant scopes' rooms alone: the weighted shares

    def room(self, scope: str) -> int | None:
        if scope in self.rooms:
            return self.rooms[scope]
        return 0 if self.every_tenant_limited and scope.startswith("tenant:") else None


def build_oracle(
    store: Store, queued: Sequence[Queued], running: Mapping[str, int], cursor: str, limit: int, now: datetime
) -> Oracle:
    """The candidates the claim sees now (the module docstring says which), and ``choose``'s picks."""
    rooms = {usage.scope: usage.room(now) for usage in store.scope_usage()}
    limits_set = {lim.scope: lim for lim in store.list_limits()}
    default = limits_set.get("tenant:*")
    every_tenant_limited = default is not None and (default.concurrency is not None or default.rate is not None)

    def weight(tenant: str) -> float:
        for lim in (limits_set.get(f"tenant:{tenant}"), default):
            if lim is not None and lim.weight is not None:
                return lim.weight
        return 1.0

    def full(scope: str) -> bool:
        room = rooms[scope] if scope in rooms else (0 if every_tenant_limited and scope.startswith("tenant:") else None)
        return room is not None and room <= 0

    tenants = sorted({q.job.tenant for q in queued})
    walk = [t for t in tenants if t > cursor] + [t for t in tenants if t <= cursor]
    visiting = [t for t in walk if not full(f"tenant:{t}")][: tenants_to_visit(limit)]
    candidates = []
    for visit, tenant in enumerate(visiting):
        line = sorted(
            (q for q in queued if q.job.tenant == tenant and not any(full(s) for s in q.job.scopes[1:])),
            key=lambda q: (-q.job.priority, q.run_after, q.id),
        )
        for place, q in enumerate(line[:limit], start=1):
            vt = (running.get(tenant, 0) + place) / weight(tenant)
            candidates.append(Candidate(str(q.id), tenant, tuple(q.job.scopes), vt, visit, place))
    tenant_rooms = {scope: room for scope, room in rooms.items() if scope.startswith("tenant:")}
    return Oracle(
        candidates,
        rooms,
        every_tenant_limited,
        fair=choose(candidates, rooms, every_tenant_limited=every_tenant_limited, limit=limit),
        shares=choose(candidates, tenant_rooms, every_tenant_limited=every_tenant_limited, limit=limit),
    )


def ids(jobs: Sequence[Candidate]) -> set[str]:
    return {job.id for job in jobs}


def describe(queued: Sequence[Queued], claimed: set[str], oracle: Oracle) -> str:
    """The claim in a line a failure can be read from: tenant/kind/queue/key/priority of each job."""
    name = {str(q.id): f"{q.job.tenant}/{q.job.kind}/{q.job.queue}/{q.job.key}/p{q.job.priority}" for q in queued}
    return (
        f"rooms {oracle.rooms}, queued {sorted(name.values())}: postgres took {sorted(name[i] for i in claimed)}, "
        f"choose {sorted(name[c.id] for c in oracle.fair)}, the shares {sorted(name[c.id] for c in oracle.shares)}"
    )


def assert_claim_within_the_oracle(oracle: Oracle, claimed: set[str], context: str) -> None:
    """Properties 1-3 of the module docstring, for one claim."""
    taken = [c for c in oracle.candidates if c.id in claimed]
    assert len(taken) == len(claimed), f"took jobs that were no candidates: {context}"
    per_scope = Counter(scope for job in taken for scope in job.scopes)
    over = {s: (n, oracle.room(s)) for s, n in per_scope.items() if oracle.room(s) is not None and n > oracle.room(s)}
    assert not over, f"scopes over their limit (taken, room): {over}; {context}"
    assert claimed <= ids(oracle.shares), f"took beyond the tenants' shares: {context}"
    if ids(oracle.fair) == ids(oracle.shares):  # no kind/queue/key limit binds in this claim
        event("no kind/queue/key limit binds: exactly choose's jobs")
        assert claimed == ids(oracle.fair), context
    else:
        event("a kind/queue/key limit binds: within the shares")


jobs = st.builds(
    Job,
    tenant=st.sampled_from(TENANTS),
    kind=st.sampled_from(KINDS),
    queue=st.sampled_from(QUEUES),
    key=st.sampled_from(KEYS),
    priority=st.integers(0, 2),
)


@st.composite
def limits(draw: st.DrawFn) -> list[Limit]:
    """Weights on most tenants (a weight changes every claim's shares) and up to four scopes
    with a concurrency limit, a rate limit or both (a limit changes only the claims it binds)."""
    weights = {f"tenant:{t}": draw(st.none() | st.sampled_from([0.5, 2.0, 3.0])) for t in (*TENANTS, "*")}
    capped = {}
    for scope in draw(st.lists(st.sampled_from(SCOPES), unique=True, max_size=4)):
        capped[scope] = draw(
            st.tuples(st.none() | st.integers(0, 3), st.none() | st.integers(1, 3)).filter(lambda c: c != (None, None))
        )
    return [
        Limit(scope, concurrency, rate, 60.0 if rate is not None else None, weights.get(scope))
        for scope in SCOPES
        for concurrency, rate in [capped.get(scope, (None, None))]
        if (concurrency, rate, weights.get(scope)) != (None, None, None)
    ]


@pytest.fixture
def pg(pg_url: str) -> Iterator[Database]:
    database = Database(pg_url)
    yield database
    database.close()


# One database for all examples is deliberate (a copy each would cost more than the
# examples): every example empties the tables first and opens its own stores.
@pytest.mark.slow
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    running_jobs=st.lists(jobs, max_size=5),
    limits_set=limits(),
    waiting=st.lists(st.tuples(jobs, st.integers(0, 1)), min_size=1, max_size=10),  # (job, seconds after the last)
    claims=st.lists(st.integers(1, 5), min_size=1, max_size=2),
)
def test_the_postgres_claim_keeps_limits_and_shares_and_picks_as_the_fair_choice(
    pg_url: str,
    pg: Database,
    running_jobs: list[Job],
    limits_set: list[Limit],
    waiting: list[tuple[Job, int]],
    claims: list[int],
) -> None:
    for table in TABLES_CHILD_FIRST:
        pg.execute(f"DELETE FROM {table}")
    clock = FakeClock()
    running: Counter[str] = Counter()
    if running_jobs:  # another worker's (its store's cursor is its own), claimed before any limit
        with closing(build_store(pg_url, clock)) as other:
            other.enqueue_many([job.new() for job in running_jobs])
            assert len(other.claim("other", QUEUES, len(running_jobs), LEASE_SECONDS)) == len(running_jobs)
        running.update(job.tenant for job in running_jobs)
    with closing(build_store(pg_url, clock)) as store:
        for lim in limits_set:
            store.set_limit(lim)
        queued = []
        for job, pause in waiting:
            clock.advance(pause)
            status = store.enqueue(job.new())
            queued.append(Queued(status.id, job, status.run_after))
        clock.advance(1)
        cursor = ""
        for n, limit in enumerate(claims):
            oracle = build_oracle(store, queued, running, cursor, limit, clock.now())
            claimed = store.claim(f"worker-{n}", QUEUES, limit, LEASE_SECONDS)
            taken = {str(c.id) for c in claimed}

            context = f"claim {n} of {limit} from cursor {cursor!r}, running {dict(running)}: " + describe(
                queued, taken, oracle
            )
            assert_claim_within_the_oracle(oracle, taken, context)
            running.update(c.tenant for c in claimed)
            queued = [q for q in queued if str(q.id) not in taken]
            cursor = advance_cursor(cursor, [c.tenant for c in claimed])


# -- the two differences, smallest examples (Hypothesis's, hand-shrunk) --------------------
# Each asserts what ``choose`` picks; PostgreSQL picks otherwise today. strict: a change of
# CLAIM_JOBS that makes them agree shows here as an unexpected pass, to be unmarked.


def enqueue_in_order(store: Store, jobs: Sequence[Job]) -> dict[uuid.UUID, Job]:
    return {store.enqueue(job.new()).id: job for job in jobs}


@pytest.mark.xfail(
    strict=True,
    reason="CLAIM_JOBS sizes shares without kind/queue/key rooms: a refused job's slot stays idle for the claim",
)
def test_a_kind_limit_with_room_for_one_leaves_no_slot_idle_while_another_kind_waits(
    make_store, pg_url: str, clock: FakeClock
):
    store = make_store(pg_url, clock=clock)
    store.set_limit(Limit("kind:k1", concurrency=1))
    enqueue_in_order(store, [Job("a", "k1", priority=1), Job("a", "k2"), Job("b", "k1")])
    clock.advance(1)

    claimed = store.claim("worker", QUEUES, 2, LEASE_SECONDS)

    # choose: a/k1 (virtual time 1), b/k1 skipped (kind:k1 full), a/k2 (2). PostgreSQL's
    # shares are a:1 and b:1 (a/k1 and b/k1, both 1); b/k1 is refused and a/k2 not tried.
    assert sorted((c.tenant, c.kind) for c in claimed) == [("a", "k1"), ("a", "k2")]


@pytest.mark.xfail(
    strict=True,
    reason="CLAIM_JOBS admits a contested scope's jobs by place in their tenant's line, not by virtual time",
)
def test_a_contested_kind_slot_goes_to_the_tenant_with_the_lower_virtual_time(
    make_store, pg_url: str, clock: FakeClock
):
    with closing(build_store(pg_url, clock)) as other:
        other.enqueue_many([Job("a", "k2").new() for _ in range(3)])
        assert len(other.claim("other", QUEUES, 3, LEASE_SECONDS)) == 3
    store = make_store(pg_url, clock=clock)
    store.set_limit(Limit("kind:k1", concurrency=1))
    enqueue_in_order(store, [Job("a", "k1"), Job("b", "k2", priority=2), Job("b", "k2", priority=1), Job("b", "k1")])
    clock.advance(1)

    claimed = store.claim("worker", QUEUES, 4, LEASE_SECONDS)

    # Virtual times: b's jobs 1, 2, 3; a's one job (3 running) 4. choose gives kind:k1's one
    # slot to b/k1 (3) and then finds a/k1 full. PostgreSQL admits a/k1, first in a's line,
    # over b/k1, third in b's: the tenant with three running jobs gets the slot.
    assert sorted((c.tenant, c.kind) for c in claimed) == [("b", "k1"), ("b", "k2"), ("b", "k2")]
