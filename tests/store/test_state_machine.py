"""Random operation sequences against a real store, checking DESIGN.md's invariants after every step.

Hypothesis drives enqueue / claim / heartbeat / complete / fail / release /
acknowledge-cancel / reap / cancel / replay / advance-the-clock in any order, with
tokens that are current and tokens that went stale. After each step the rows are
read back and checked:

1. at most one worker holds a running job: a running job has exactly one open
   attempt row, and it belongs to the job's current token; a stale token changes
   nothing at all;
2. a running job has a lease owner and expiry; after a reap, no lease is past due;
3. a failed job has an error, a finished attempt has an outcome (and a failed one
   its error);
5. a terminal job changes only through replay, and each replay is recorded;

and attempts stay within max_attempts, results exist exactly for succeeded jobs.

Limits come and go among the steps (tenant:*, tenant:NAME, key:, queue:, kind:
concurrency limits, set and deleted): every scope counter always equals the
running jobs it counts, and no claim ever puts a scope over its limit (a limit
lowered below what runs stops nothing, but nothing of the scope starts until it
is under). A claim takes only due jobs, and each tenant's in its own claim order;
with no limit set it takes as many as it may (work-conserving).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from service.errors import IdempotencyConflict, InvalidTransition, LeaseLost, LimitNotFound
from service.jobs import JobState, Lease, NewJob, ReplayFilter
from service.limits import Limit
from service.retry import GiveUp, Retry, RetryPolicy
from tests.conftest import Database, FakeClock
from tests.store.builders import reap

TABLES_CHILD_FIRST = ("job_replays", "job_attempts", "job_results", "job_edges", "jobs", "scope_counters", "limits")
TENANTS = ("t1", "t2")
SCOPES = ("tenant:*", "tenant:t1", "key:g1", "key:g2", "queue:a", "kind:k")
SCOPE_COLUMN = {"tenant": "tenant", "kind": "kind", "queue": "queue", "key": "concurrency_key"}
QUEUES = ("a", "b")
WORKERS = ("w1", "w2")  # few workers: the same worker often reclaims a job it lost
# Shrinking a failing sequence against a real database can take minutes (Hypothesis
# stops only after five), so by default a failure is reported as found, at most 30
# steps long. JOBQ_STATEFUL_SHRINK=1 shrinks it; JOBQ_STATEFUL_EXAMPLES=500 searches longer.
# By default, 20 sequences per store in every run (600 steps): the suite's budget; each
# run draws new ones, so the search goes on across runs.
RUN_SETTINGS = settings(
    max_examples=int(os.environ.get("JOBQ_STATEFUL_EXAMPLES", "20")),
    stateful_step_count=30,
    deadline=None,
    phases=[p for p in Phase if p is not Phase.shrink or os.environ.get("JOBQ_STATEFUL_SHRINK") == "1"],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

pick = st.integers(min_value=0, max_value=10_000)
WRITE_ACTIONS = st.sampled_from(["heartbeat", "complete", "fail", "release", "acknowledge_cancel"])
DONE = st.sampled_from([None, 0, 5, 10])


@dataclass
class Model:
    """What the test remembers between steps (the rows themselves are the truth)."""

    jobs: list[uuid.UUID]
    leases: list[Lease]
    claims: dict[str, int]  # job id -> claims made, i.e. attempt rows expected
    replays: int
    terminal: dict[str, dict[str, Any]]  # job id -> row, for jobs that were terminal after the last step


def make_machine(store: Any, db: Database, clock: FakeClock) -> type[RuleBasedStateMachine]:
    class QueueMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            for table in TABLES_CHILD_FIRST:  # a fresh queue per example, cheaper than a new database
                db.execute(f"DELETE FROM {table}")
            # Time moves on from the last example, never back, as the database's clock does: the
            # store learns where its lines begin from its claims (service.store.postgres.heads),
            # and a job due before what it learned would wait for its next full walk.
            clock.advance(86_400)
            self.model = Model(jobs=[], leases=[], claims={}, replays=0, terminal={})
            self.replayed_now: set[str] = set()
            self.operator_replayed: set[str] = set()  # replayed by id: the operator's word overrides its parents
            self.zombie = False

        @initialize(
            jobs=st.lists(
                st.tuples(st.integers(0, 2), st.integers(1, 3), st.sampled_from(QUEUES)), min_size=1, max_size=5
            )
        )
        def some_jobs_are_waiting(self, jobs):
            for priority, max_attempts, queue in jobs:
                self.enqueue(priority, max_attempts, 0, queue, None, None, TENANTS[priority % 2], None)

        # -- helpers ------------------------------------------------------------------
        def rows(self) -> dict[str, dict[str, Any]]:
            return {r["id"]: r for r in db.rows("SELECT * FROM jobs")}

        def snapshot(self) -> tuple[Any, ...]:
            return tuple(db.rows(f"SELECT * FROM {t} ORDER BY 1") for t in TABLES_CHILD_FIRST)

        def is_current(self, lease: Lease) -> bool:
            row = self.rows().get(str(lease.job_id))
            return (
                row is not None
                and row["state"] == "running"
                and row["lease_owner"] == lease.owner
                and row["attempts"] == lease.attempt
                and row["claims"] == lease.claim
            )

        def choose(self, items: list[Any], index: int) -> Any:
            return items[index % len(items)]

        def choose_lease(self, index: int) -> Lease:
            """A token for the next write: ``self.zombie`` picks one that went stale on a
            job someone else runs now (when there is one), else any of the newest three."""
            leases = self.model.leases
            if self.zombie:
                rows = self.rows()
                zombies = [
                    lease
                    for lease in leases
                    if rows[str(lease.job_id)]["state"] == "running" and not self.is_current(lease)
                ] or [lease for lease in leases if not self.is_current(lease)]
                if zombies:
                    return self.choose(zombies, index)
            return self.choose(leases[-3:], index)

        def stale_write(self, lease: Lease, write: Any) -> None:
            """A stale token: the write reports the lost lease (or answers from its receipt) and changes nothing."""
            before = self.snapshot()
            try:
                write()
            except LeaseLost:
                pass
            assert self.snapshot() == before, f"a stale token {lease} changed the database"

        # -- submitting ---------------------------------------------------------------
        @rule(
            priority=st.integers(0, 2),
            max_attempts=st.integers(1, 3),
            delay=st.sampled_from([0, 0, 5]),
            queue=st.sampled_from(QUEUES),
            total=st.sampled_from([None, 10]),
            key=st.sampled_from([None, None, None, "k1", "k2"]),
            tenant=st.sampled_from(TENANTS),
            group=st.sampled_from([None, "g1", "g2"]),
        )
        def enqueue(self, priority, max_attempts, delay, queue, total, key, tenant="t1", group=None):
            before = {r["id"] for r in self.rows().values()}
            try:
                status = self._enqueue_keyed(priority, max_attempts, delay, queue, total, key, tenant, group)
            except IdempotencyConflict:  # the key names another job: refused, nothing written
                assert key is not None and db.count("jobs", "idempotency_key = %(k)s", k=key) > 0
                return
            if str(status.id) in before:
                assert key is not None, "a job without an idempotency key was not inserted"
            else:
                assert status.state is JobState.QUEUED and status.attempts == 0
                self.model.jobs.append(status.id)
                self.model.claims[str(status.id)] = 0

        def _enqueue_keyed(self, priority, max_attempts, delay, queue, total, key, tenant, group):
            return store.enqueue(
                NewJob(
                    kind="k",
                    payload={"n": len(self.model.jobs)},
                    queue=queue,
                    priority=priority,
                    max_attempts=max_attempts,
                    delay_seconds=delay,
                    total=total,
                    idempotency_key=key,
                    tenant=tenant,
                    concurrency_key=group,
                )
            )

        @precondition(lambda self: self.model.jobs)
        @rule(which=st.lists(st.integers(0, 50), min_size=1, max_size=3), run_anyway=st.booleans())
        def enqueue_child(self, which, run_anyway):
            """Workflows: a job waiting for one to three earlier jobs of one tenant."""
            rows = self.rows()
            first = self.choose(self.model.jobs, which[0])
            tenant = rows[str(first)]["tenant"]
            parents = tuple(
                dict.fromkeys(
                    p for p in (self.choose(self.model.jobs, i) for i in which) if rows[str(p)]["tenant"] == tenant
                )
            )
            status = store.enqueue(
                NewJob(
                    kind="k",
                    payload={"n": len(self.model.jobs)},
                    queue="a",
                    tenant=tenant,
                    depends_on=parents,
                    on_parent_failure="run" if run_anyway else "cancel",
                )
            )
            self.model.jobs.append(status.id)
            self.model.claims[str(status.id)] = 0
            ended = [p for p in parents if rows[str(p)]["state"] in ("failed", "cancelled")]
            unfinished = [p for p in parents if rows[str(p)]["state"] in ("queued", "running")]
            if ended and not run_anyway:
                assert status.state is JobState.CANCELLED and status.error, "a child of a failed parent was queued"
            else:
                assert (status.state, status.parents_pending) == (JobState.QUEUED, len(unfinished))

        # -- the worker's side ----------------------------------------------------------
        @rule(
            worker=st.sampled_from(WORKERS),
            limit=st.integers(1, 3),
            queues=st.sampled_from([("a",), ("b",), ("a", "b")]),
            lease_seconds=st.sampled_from([5, 30]),
        )
        def claim(self, worker, limit, queues, lease_seconds):
            now = clock.now()
            due = sorted(
                (
                    r
                    for r in self.rows().values()
                    if r["state"] == "queued" and r["queue"] in queues and r["run_after"] <= now
                ),
                key=lambda r: (-r["priority"], r["run_after"], r["id"]),
            )
            counters_before = {u.scope: u.running for u in store.scope_usage()}
            claimed = store.claim(worker, list(queues), limit, lease_seconds)

            taken = {str(c.id) for c in claimed}
            assert taken <= {r["id"] for r in due}, "a claim took a job that is not due"
            for tenant in TENANTS:
                line = [r["id"] for r in due if r["tenant"] == tenant]
                mine = [i for i in line if i in taken]
                if not store.list_limits():
                    assert mine == line[: len(mine)], f"tenant {tenant}'s jobs not taken in its own order"
            if not store.list_limits():
                assert len(claimed) == min(limit, len(due)), "free slots left idle with due jobs and no limits"
            for usage in store.scope_usage():
                if usage.concurrency is not None and usage.running > usage.concurrency:
                    assert usage.running <= counters_before.get(usage.scope, 0), (
                        f"the claim put {usage.scope} over its limit: {usage.running} of {usage.concurrency}"
                    )
            after = self.rows()
            for job in claimed:
                row = after[str(job.id)]
                assert (row["state"], row["lease_owner"], row["attempts"]) == ("running", worker, job.attempt)
                # Workflows: no job with an unfinished parent ever starts. Its first start, that is:
                # a job that ran once is not held back by a later replay of its parents (only a
                # job that has not started waits for them again), and its retry runs on its own.
                started_before = self.model.claims[str(job.id)] > 0
                for edge in db.rows("SELECT parent FROM job_edges WHERE child = %(c)s", c=str(job.id)):
                    if started_before:
                        break
                    parent = after[edge["parent"]]["state"]
                    settled = parent == "succeeded" or (
                        parent in ("failed", "cancelled")
                        and (row["on_parent_failure"] == "run" or str(job.id) in self.operator_replayed)
                    )
                    assert settled, f"job {job.id} started while its parent {edge['parent']} is {parent}"
                self.model.claims[str(job.id)] += 1
                self.model.leases.append(job.lease)

        def heartbeat(self, which, done):
            lease = self.choose_lease(which)
            if not self.is_current(lease):
                before = self.snapshot()
                assert store.heartbeat(lease, 30, done=done, checkpoint={"d": done}).held is False
                assert self.snapshot() == before, f"a stale heartbeat {lease} changed the database"
                return
            row = self.rows()[str(lease.job_id)]
            beat = store.heartbeat(lease, 30, done=done, checkpoint={"d": done})
            assert beat.held is True
            assert beat.cancel_requested == bool(row["cancel_requested"])
            after = db.job(lease.job_id)
            assert after["done"] == (row["done"] if done is None else done)
            assert after["lease_expires_at"] > clock.now()

        def complete(self, which):
            lease = self.choose_lease(which)
            if not self.is_current(lease):
                self.stale_write(lease, lambda: store.complete(lease, {"by": lease.owner}))
                return
            store.complete(lease, {"by": lease.owner})
            assert db.job(lease.job_id)["state"] == "succeeded"
            assert store.get_result(lease.job_id) == {"by": lease.owner}

        def fail(self, which, retryable):
            lease = self.choose_lease(which)
            if not self.is_current(lease):
                self.stale_write(lease, lambda: store.fail(lease, "stale error", Retry(0.0) if retryable else GiveUp()))
                return
            row = self.rows()[str(lease.job_id)]
            decision = RetryPolicy().decide(lease.attempt, row["max_attempts"], retryable)
            result = store.fail(lease, f"error on attempt {lease.attempt}", decision)
            if row["cancel_requested"]:
                expected = JobState.CANCELLED
            elif retryable and row["attempts"] < row["max_attempts"]:
                expected = JobState.QUEUED
            else:
                expected = JobState.FAILED
            assert result.state is expected
            after = db.job(lease.job_id)
            assert after["state"] == expected.value
            assert after["error"] == f"error on attempt {lease.attempt}"

        def release(self, which):
            lease = self.choose_lease(which)
            if not self.is_current(lease):
                self.stale_write(lease, lambda: store.release(lease))
                return
            cancel_requested = self.rows()[str(lease.job_id)]["cancel_requested"]
            store.release(lease)
            after = db.job(lease.job_id)
            if cancel_requested:  # a job asked to stop is not handed back: it ends cancelled
                assert (after["state"], after["attempts"]) == ("cancelled", lease.attempt)
                return
            assert (after["state"], after["attempts"]) == ("queued", lease.attempt - 1)
            assert after["run_after"] == clock.now()

        def acknowledge_cancel(self, which):
            lease = self.choose_lease(which)
            if not self.is_current(lease):
                self.stale_write(lease, lambda: store.acknowledge_cancel(lease))
                return
            if not self.rows()[str(lease.job_id)]["cancel_requested"]:
                return  # a worker acknowledges only a cancel it was told about
            store.acknowledge_cancel(lease)
            assert db.job(lease.job_id)["state"] == "cancelled"

        # -- limits -------------------------------------------------------------------------
        @rule(scope=st.sampled_from(SCOPES), concurrency=st.integers(0, 2))
        def set_limit(self, scope, concurrency):
            store.set_limit(Limit(scope, concurrency=concurrency))

        @rule(scope=st.sampled_from(SCOPES))
        def delete_limit(self, scope):
            try:
                store.delete_limit(scope)
            except LimitNotFound:
                assert scope not in {limit.scope for limit in store.list_limits()}

        # -- maintenance and operators ----------------------------------------------------
        def reap(self):
            now = clock.now()
            expired = {
                r["id"]: r for r in self.rows().values() if r["state"] == "running" and r["lease_expires_at"] < now
            }
            result = reap(store)
            assert result.total == len(expired)
            after = self.rows()
            for job_id, before in expired.items():
                row = after[job_id]
                if before["cancel_requested"]:
                    assert row["state"] == "cancelled"
                elif before["attempts"] < before["max_attempts"]:
                    assert row["state"] == "queued" and "lease expired" in row["error"]
                else:
                    assert row["state"] == "failed" and "lease expired" in row["error"]
            assert not [r for r in after.values() if r["state"] == "running" and r["lease_expires_at"] < now]

        @precondition(lambda self: self.model.jobs)
        @rule(which=pick)
        def cancel(self, which):
            job_id = self.choose(self.model.jobs, which)
            before = self.rows()[str(job_id)]
            try:
                status = store.cancel(job_id)
            except InvalidTransition as exc:
                assert before["state"] in {"succeeded", "failed", "cancelled"}, exc
                assert exc.state == before["state"]
                return
            if before["state"] == "queued":
                assert status.state is JobState.CANCELLED
            else:
                assert (status.state, status.cancel_requested) == (JobState.RUNNING, True)

        @precondition(lambda self: self.model.jobs)
        @rule(which=pick, by_id=st.booleans(), dry_run=st.booleans())
        def replay(self, which, by_id, dry_run):
            before_rows = self.rows()
            if by_id:
                job_id = self.choose(self.model.jobs, which)
                which_jobs = ReplayFilter(ids=(job_id,))
                replayable = {str(job_id)} & {
                    i for i, r in before_rows.items() if r["state"] in {"failed", "cancelled"}
                }
            else:
                which_jobs = ReplayFilter()
                replayable = {i for i, r in before_rows.items() if r["state"] == "failed"}
            before = self.snapshot()

            replayed = {str(i) for i in store.replay(which_jobs, by="operator", dry_run=dry_run)}

            assert replayed == replayable
            if dry_run:
                assert self.snapshot() == before
                return
            after = self.rows()
            for job_id in replayed:
                assert (after[job_id]["state"], after[job_id]["attempts"], after[job_id]["error"]) == (
                    "queued",
                    0,
                    None,
                )
            # Workflows: the jobs a replayed job's failure cancelled are re-armed, each replay recorded.
            rearmed = {
                i for i, r in after.items()
                if i not in replayed and before_rows[i]["state"] == "cancelled" and r["state"] == "queued"
            }  # fmt: skip
            for job_id in rearmed:
                assert before_rows[job_id]["cancelled_by"] in replayed, f"{job_id} re-armed by no replayed job"
            # Those a replayed job had cancelled but another failed parent still holds stay cancelled,
            # now naming the job whose replay re-arms them (no replay of their own is recorded).
            held = {
                i for i, r in after.items()
                if before_rows[i]["state"] == r["state"] == "cancelled" and r["cancelled_by"] != before_rows[i]["cancelled_by"]
            }  # fmt: skip
            for job_id in held:
                assert before_rows[job_id]["cancelled_by"] in replayed, f"{job_id} held anew by no replayed job"
                assert after[job_id]["cancelled_by"] not in replayed | rearmed, f"{job_id} held by a re-armed job"
            self.model.replays += len(replayed) + len(rearmed)
            self.replayed_now = replayed | rearmed | held
            if by_id:
                self.operator_replayed |= replayed

        def write(self, which, action, done, retryable):
            if action == "heartbeat":
                self.heartbeat(which, done)
            elif action == "fail":
                self.fail(which, retryable)
            else:
                getattr(self, action)(which)

        @precondition(lambda self: self.model.leases)
        @rule(which=pick, action=WRITE_ACTIONS, done=DONE, retryable=st.booleans())
        def holder_writes(self, which, action, done, retryable):
            """A worker writes with one of the newest tokens (most likely still its own)."""
            self.zombie = False
            self.write(which, action, done, retryable)

        @precondition(lambda self: self.model.leases)
        @rule(which=pick, action=WRITE_ACTIONS, done=DONE, retryable=st.booleans())
        def zombie_writes(self, which, action, done, retryable):
            """A worker that lost its lease wakes up and writes with its old token."""
            self.zombie = True
            self.write(which, action, done, retryable)

        @rule(seconds=st.sampled_from([0, 1, 4, 6, 31, 700]), then_reap=st.booleans())
        def time_passes(self, seconds, then_reap):
            clock.advance(seconds)
            if then_reap:
                self.reap()

        @precondition(lambda self: self.model.leases)
        @rule()
        def every_lease_expires_and_is_reaped(self):
            """Workers paused past their leases: the commonest way a token goes stale."""
            clock.advance(31)
            self.reap()
            clock.advance(8)  # past the first retries' backoff, so the jobs can be claimed again

        # -- invariants, checked after every step ---------------------------------------------
        @invariant()
        def rows_keep_the_design_invariants(self):
            jobs = self.rows()
            attempts = db.rows("SELECT * FROM job_attempts")
            open_attempts: dict[str, list[dict[str, Any]]] = {}
            for attempt in attempts:
                if attempt["finished_at"] is None:
                    assert attempt["outcome"] is None
                    open_attempts.setdefault(attempt["job_id"], []).append(attempt)
                else:
                    assert attempt["outcome"] is not None, "a finished attempt without its outcome"
                    if attempt["outcome"] in {"failed", "lease_expired"}:
                        assert attempt["error"], "a failed attempt without its error"
            results = {r["job_id"] for r in db.rows("SELECT job_id FROM job_results")}

            for job_id, row in jobs.items():
                assert 0 <= row["attempts"] <= row["max_attempts"]
                assert row["claims"] == self.model.claims[job_id], "claims is not the number of claims"
                opened = open_attempts.get(job_id, [])
                if row["state"] == "running":
                    assert row["lease_owner"] and row["lease_expires_at"] is not None
                    assert len(opened) == 1, f"running job {job_id} has {len(opened)} open attempts"
                    assert (opened[0]["worker"], opened[0]["attempt"], opened[0]["claim"]) == (
                        row["lease_owner"],
                        row["attempts"],
                        row["claims"],
                    ), "the open attempt is not the current holder's"
                else:
                    assert opened == [], f"{row['state']} job {job_id} still has an open attempt"
                    assert row["lease_expires_at"] is None
                if row["state"] == "queued":
                    assert not row["cancel_requested"]
                if row["state"] == "failed":
                    assert row["error"], "failed without an error"
                assert (row["state"] == "succeeded") == (job_id in results) == (row["result_id"] is not None)
                if row["state"] in {"succeeded", "failed", "cancelled"}:
                    assert row["finished_at"] is not None
                assert len([a for a in attempts if a["job_id"] == job_id]) == self.model.claims[job_id]

            for job_id, was in self.model.terminal.items():
                if job_id not in self.replayed_now:
                    now = jobs[job_id]
                    # One exception, not a change of state or outcome: a finished independent
                    # job named as a parent later becomes its workflow's root (workflow_id set
                    # once, from NULL; migration 0016), so its workflow's progress counts it.
                    if was["workflow_id"] is None and now["workflow_id"] is not None:
                        was = {**was, "workflow_id": now["workflow_id"]}
                    assert now == was, f"terminal job {job_id} changed without a replay"
            self.model.terminal = {i: r for i, r in jobs.items() if r["state"] in {"succeeded", "failed", "cancelled"}}
            self.replayed_now = set()
            assert db.count("job_replays") == self.model.replays

        @invariant()
        def a_waiting_job_counts_exactly_its_unfinished_parents(self):
            """Workflows: a queued job's parents_pending is its parents still queued or running
            (one that has not started: a retry waits for no parent, see ``claim``)."""
            rows = db.rows(
                "SELECT c.id, c.parents_pending, c.run_after,"
                " (SELECT count(*) FROM job_edges e JOIN jobs p ON p.id = e.parent"
                "  WHERE e.child = c.id AND p.state IN ('queued', 'running')) AS unfinished"
                " FROM jobs c WHERE c.state = 'queued' AND c.parents_total > 0 AND c.attempts = 0"
            )
            for row in rows:
                assert row["parents_pending"] == row["unfinished"], row

        @invariant()
        def every_counter_equals_the_running_jobs_it_counts(self):
            limited = {limit.scope: limit for limit in store.list_limits()}
            for usage in store.scope_usage():
                kind, _, name = usage.scope.partition(":")
                actual = db.count("jobs", f"state = 'running' AND {SCOPE_COLUMN[kind]} = %(name)s", name=name)
                assert usage.running == actual, f"{usage.scope} counts {usage.running}, {actual} run: a slot leaked"
                own = limited.get(usage.scope)
                default = limited.get("tenant:*") if kind == "tenant" else None
                expected = (
                    own.concurrency
                    if own and own.concurrency is not None
                    else (default.concurrency if default else None)
                )
                assert usage.concurrency == expected, f"{usage.scope} holds limit {usage.concurrency}, not {expected}"
            for scope, limit in limited.items():
                if scope != "tenant:*" and limit.concurrency is not None:
                    assert scope in {u.scope for u in store.scope_usage()}, f"{scope} is limited but has no counter"

        @invariant()
        def stale_reads_true_exactly_when_a_running_lease_is_past_due(self):
            now = clock.now()
            for job_id, row in self.rows().items():
                expected = row["state"] == "running" and row["lease_expires_at"] < now
                assert store.get(uuid.UUID(job_id)).stale is expected

    return QueueMachine


@pytest.mark.slow
def test_random_operation_sequences_keep_every_invariant(store, db: Database, clock: FakeClock):
    run_state_machine_as_test(make_machine(store, db, clock), settings=RUN_SETTINGS)
