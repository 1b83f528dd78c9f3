"""The PostgreSQL store: psycopg 3, a small pool, SKIP LOCKED claims, LISTEN/NOTIFY.

The class is made of the store's areas, one module each (submit, reads, items, ops,
maintenance, limits, tokens, workers: each its statements and the operations that run
them, on the plumbing of :mod:`.connection`); the worker's hot path (claim, heartbeat,
complete, fail, release) is here, its statements in :mod:`.statements`. A new area is a
new module with a class on ``Connected``, added to the bases below.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from service.errors import JobNotFound, LeaseLost
from service.jobs import (
    JSON,
    AttemptOutcome,
    ClaimedJob,
    ClaimRequest,
    Completion,
    FailResult,
    Heartbeat,
    ItemOutcome,
    JobState,
    Lease,
    new_job_ids,
)
from service.payloads import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_MAX_RESULT_BYTES, check_claim
from service.retry import Decision
from service.store import checks
from service.store.base import Clock
from service.store.fairness import advance_cursor, tenants_to_visit
from service.store.postgres.connection import READ as _READ
from service.store.postgres.connection import Connected, Preparation, PrepareMode, fence, open_pool
from service.store.postgres.console import Console
from service.store.postgres.errors import LockWaitTooLong
from service.store.postgres.heads import LineHeads
from service.store.postgres.items import Items, item_batch
from service.store.postgres.leadership import Leadership
from service.store.postgres.limits import Limits
from service.store.postgres.maintenance import Maintenance
from service.store.postgres.ops import Operations
from service.store.postgres.reads import Reads
from service.store.postgres.schedules import Schedules
from service.store.postgres.statements import (
    ACKNOWLEDGE_CANCEL,
    CLAIM_JOBS,
    CLAIM_PLANNER,
    COMPLETE_JOBS,
    FAIL_JOB,
    HAS_CLAIMABLE,
    KEY_LOOKUP_PLANNER,
    READ_ATTEMPT_RECEIPT,
    REFILL_LOCK_TIMEOUT,
    REFILL_LOCK_TIMEOUT_END,
    RELEASE_JOB,
    RENEW_LEASE,
)
from service.store.postgres.steps import run_steps
from service.store.postgres.submit import Submitting
from service.store.postgres.tokens import Tokens
from service.store.postgres.workers import Workers
from service.store.postgres.workflows import LOCK_JOBS, SETTLE_DEPENDENTS
from service.store.rows import claimed_job
from service.workflows import children_refused


class PostgresStore(
    Submitting,
    Operations,
    Limits,
    Items,
    Maintenance,
    Schedules,
    Leadership,
    Tokens,
    Reads,
    Workers,
    Console,
    Connected,
):
    """The queue on PostgreSQL. Holds a bounded pool; uses a connection only per statement."""

    def __init__(
        self,
        database_url: str,
        *,
        pool_size: int = 1,
        notify: bool = True,
        prepare: PrepareMode = "auto",
        clock: Clock | None = None,
        pool_timeout: float = 10.0,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self.database_url = database_url
        self.max_result_bytes = max_result_bytes
        self.max_payload_bytes = max_payload_bytes
        self.notify = notify
        self._clock = clock
        self._claim_cursor = ""  # the fair claim's place among tenants (service.store.fairness)
        self._heads = LineHeads()  # where the lines it claims from begin (behind a pinned horizon)
        self._preparation = Preparation(prepare)
        # Not known yet: the first call looks directly before waiting on the pool, so a command
        # run against a server that is down answers at once (it waited the pool's 10 s).
        self._unreachable = "not reached yet"
        self._pool = open_pool(database_url, pool_size, self._preparation, pool_timeout)

    # -- the worker's hot path ------------------------------------------------------
    # Statements that must share a transaction are sent in one pipeline, with no BEGIN
    # or COMMIT: on the pool's autocommit connections everything sent before the
    # pipeline's one Sync is one implicit transaction, committed at the Sync, rolled back
    # whole if a statement fails, and settings made with set_config(..., true) last as
    # long. One round trip. (psycopg's conn.transaction() inside a pipeline syncs at each
    # of its nested exits: the claim sent four Syncs that way, tests/store/test_round_trips.py.)
    def claim(
        self,
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        kinds: Sequence[str] | None = None,
        max_attempts: Mapping[str, int] | None = None,
    ) -> list[ClaimedJob]:
        request = ClaimRequest(
            worker,
            tuple(queues),
            limit,
            lease_seconds,
            tuple(kinds) if kinds is not None else None,
            tuple((max_attempts or {}).items()),
        )
        statement, params = self._claim_statement(request)
        return self._claimed(request, self._behind_claim_planner(statement, params))

    def _behind_claim_planner(
        self, statement: str, params: Mapping[str, Any], *, replay: bool = False
    ) -> list[dict[str, Any]]:
        """CLAIM_JOBS (or HAS_CLAIMABLE, a read: ``replay``) behind CLAIM_PLANNER: one
        transaction, one round trip (the hot path's comment)."""

        def run() -> list[dict[str, Any]]:
            with self._connection() as conn:
                with conn.pipeline():
                    conn.execute(CLAIM_PLANNER)
                    got = conn.execute(statement, params)
                return got.fetchall()

        return self._retrying(run, replay=replay)

    def _claim_statement(self, request: ClaimRequest) -> tuple[str, dict[str, Any]]:
        check_claim(request.worker, request.limit, request.lease_seconds)
        return CLAIM_JOBS, self._params(
            worker=request.worker,
            queues=list(request.queues),
            limit=request.limit,
            visit=tenants_to_visit(request.limit),
            cursor=self._claim_cursor,
            lease_seconds=float(request.lease_seconds),
            kinds=list(request.kinds) if request.kinds is not None else None,
            kind_max_attempts=json.dumps(dict(request.max_attempts)),
            **self._heads.params(),
        )

    def _claimed(self, request: ClaimRequest, rows: list[dict[str, Any]]) -> list[ClaimedJob]:
        self._claim_cursor = advance_cursor(self._claim_cursor, (row["tenant"] for row in rows))
        self._heads.learn(rows)
        return [claimed_job(row, request.worker, _READ) for row in rows]

    def has_claimable(self, queues: Sequence[str], kinds: Sequence[str] | None = None) -> bool:
        def probe(lines: Mapping[str, Any]) -> bool:
            params = self._params(kinds=list(kinds) if kinds is not None else None, **lines)
            rows = self._behind_claim_planner(HAS_CLAIMABLE, params, replay=True)
            return bool(rows and rows[0]["claimable"])

        return probe(self._heads.poll(queues)) or self._heads.poll_in_full(queues, probe)

    def heartbeat(
        self,
        lease: Lease,
        lease_seconds: float,
        done: int | None = None,
        total: int | None = None,
        checkpoint: JSON | None = None,
        items: Sequence[ItemOutcome] = (),
    ) -> Heartbeat:
        encoded = checks.heartbeat_args(lease_seconds, done, total, checkpoint)
        row = self._fetchone(
            RENEW_LEASE,
            self._params(
                **fence(lease),
                lease_seconds=float(lease_seconds),
                done=done,
                total=total,
                checkpoint=encoded,
                items=item_batch([(lease, items)], self.max_result_bytes),
            ),
        )
        if row is None:
            return Heartbeat(held=False, cancel_requested=False)
        return Heartbeat(held=True, cancel_requested=row["cancel_requested"])

    def complete(self, lease: Lease, result: JSON, done: int | None = None, total: int | None = None) -> None:
        if self.complete_many([Completion(lease, result, done, total)]):
            raise LeaseLost(lease.job_id, lease.attempt)

    def complete_many(self, finished: Sequence[Completion]) -> list[Lease]:
        if not finished:
            return []
        if any(item.children for item in finished):
            plain = [item for item in finished if not item.children]
            parenting = [item for item in finished if item.children]
            return self.complete_many(plain) + [item.lease for item in parenting if not self._complete_parenting(item)]
        finished = sorted(finished, key=lambda item: item.lease.job_id)  # rows lock in id order
        rows = self._completed(self._complete_params(finished))
        return self._lost(finished, self._complete_raced(finished, rows))

    def _completed(self, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """COMPLETE_JOBS alone, behind KEY_LOOKUP_PLANNER (one transaction, one round trip): its
        releases update children found by key, and only that plan keeps them so (``waiting``)."""

        def run() -> list[dict[str, Any]]:
            with self._connection() as conn:
                with conn.pipeline():
                    conn.execute(KEY_LOOKUP_PLANNER)
                    done = conn.execute(COMPLETE_JOBS, params)
                return done.fetchall()

        return self._retrying(run)

    def complete_and_claim(
        self, finished: Sequence[Completion], claim: ClaimRequest
    ) -> tuple[list[Lease], list[ClaimedJob]]:
        # COMPLETE_JOBS and the claim statement as they are, one after the other in one
        # transaction and one round trip (as the claim), so a steady worker pays one round trip
        # and one commit per batch of jobs, finished and refilled.
        if any(item.children for item in finished):  # their own transactions (_complete_parenting)
            return self.complete_many(finished), self.claim(
                claim.worker, claim.queues, claim.limit, claim.lease_seconds, claim.kinds, dict(claim.max_attempts)
            )
        finished = sorted(finished, key=lambda item: item.lease.job_id)
        complete_params = self._complete_params(finished) if finished else None
        claim_statement, claim_params = self._claim_statement(claim)

        def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            with self._connection() as conn:
                with conn.pipeline():
                    conn.execute(REFILL_LOCK_TIMEOUT)
                    # each statement behind its own planner settings (a plan is made under the
                    # settings of its first run and kept, whatever the settings later)
                    conn.execute(KEY_LOOKUP_PLANNER)
                    done = conn.execute(COMPLETE_JOBS, complete_params) if complete_params else None
                    conn.execute(CLAIM_PLANNER)
                    got = conn.execute(claim_statement, claim_params)
                    # The commit waits as every commit does. Never prepared: behind the claim, which may
                    # time out, the server skips it, and psycopg (3.3) records a statement it promotes to
                    # prepared (its sixth run) before any answer, so a skipped Parse leaves a name the
                    # server never had, and the next run's "does not exist" reads as a pooler's mix-up
                    # (Preparation.lost: preparing off for the whole process).
                    conn.execute(REFILL_LOCK_TIMEOUT_END, prepare=False)
                return (done.fetchall() if done is not None else []), got.fetchall()

        try:
            completed, claimed = self._retrying(run)
        except LockWaitTooLong:
            # The refill waited for a scope counter while holding those its completion gave
            # back: two finishers doing that in opposite orders deadlock. Nothing was written;
            # the completion alone, then the claim alone, each wait holding nothing else.
            completed = self._completed(complete_params) if complete_params else []
            claimed = self._behind_claim_planner(claim_statement, claim_params)
        return self._lost(finished, self._complete_raced(finished, completed)), self._claimed(claim, claimed)

    def _complete_params(self, finished: Sequence[Completion], recheck: bool = True) -> dict[str, Any]:
        return self._params(
            batch=_completion_batch(finished, self.max_result_bytes),
            items=item_batch([(item.lease, item.items) for item in finished], self.max_result_bytes),
            recheck=recheck,
        )

    def _complete_parenting(self, item: Completion) -> bool:
        """A result with the jobs its handler enqueued (ctx.enqueue), in one transaction: the job
        locked, COMPLETE_JOBS (fenced), and only if it wrote, the children (as a batch with
        dependencies). A lost lease writes neither. False when the lease was lost."""
        params = self._complete_params([item], recheck=False)

        def run() -> bool:
            with self._connection() as conn, conn.transaction(), conn.cursor() as cursor:
                cursor.execute(LOCK_JOBS, self._params(ids=[item.lease.job_id]))
                cursor.execute(KEY_LOOKUP_PLANNER)
                if not cursor.execute(COMPLETE_JOBS, params).fetchall():
                    return False
                try:
                    run_steps(cursor, self._dependent_steps(item.children, None, item.lease.job_id))
                except JobNotFound as exc:  # rolls the result back with them
                    raise children_refused(exc) from None
                return True

        if self._retrying(run):
            return True
        return checks.receipt(self._receipt(item.lease), AttemptOutcome.SUCCEEDED) is not None

    def _complete_raced(self, finished: Sequence[Completion], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """COMPLETE_JOBS's written rows, with the jobs it left unwritten because children were
        added to them while it waited for their rows (``raced``) written again now: LOCK_JOBS
        first, then COMPLETE_JOBS, in one transaction, so its snapshot sees those edges."""
        raced = {row["id"] for row in rows if row["raced"]}
        if not raced:
            return rows
        again = [item for item in finished if item.lease.job_id in raced]
        params = self._complete_params(again, recheck=False)

        def run() -> list[dict[str, Any]]:
            with self._connection() as conn:
                with conn.pipeline():
                    conn.execute(LOCK_JOBS, self._params(ids=sorted(raced)))
                    conn.execute(KEY_LOOKUP_PLANNER)
                    done = conn.execute(COMPLETE_JOBS, params)
                return done.fetchall()

        return [row for row in rows if not row["raced"]] + self._retrying(run)

    def _lost(self, finished: Sequence[Completion], written_rows: list[dict[str, Any]]) -> list[Lease]:
        written = {row["id"] for row in written_rows}
        return [
            item.lease
            for item in finished
            if item.lease.job_id not in written
            and checks.receipt(self._receipt(item.lease), AttemptOutcome.SUCCEEDED) is None
        ]

    def fail(self, lease: Lease, error: str, decision: Decision) -> FailResult:
        failure = checks.fail_args(error, decision)
        row = self._ending(FAIL_JOB, self._params(**fence(lease), **failure.params()), lease)
        if row is None:
            row = checks.require_receipt(self._receipt(lease), lease, AttemptOutcome.FAILED)
        return FailResult(
            state=JobState(row["state"]), run_after=row["run_after"] if row["state"] == "queued" else None
        )

    def release(self, lease: Lease) -> None:
        row = self._ending(RELEASE_JOB, self._params(**fence(lease)), lease)
        if row is None or row["released"] == 0:
            checks.require_receipt(self._receipt(lease), lease, AttemptOutcome.RELEASED, AttemptOutcome.CANCELLED)

    def acknowledge_cancel(self, lease: Lease) -> None:
        row = self._ending(ACKNOWLEDGE_CANCEL, self._params(**fence(lease)), lease)
        if row is None or row["stopped"] == 0:
            checks.require_receipt(self._receipt(lease), lease, AttemptOutcome.CANCELLED)

    def _ending(self, statement: str, params: Mapping[str, Any], lease: Lease) -> dict[str, Any] | None:
        """A fenced write that may end the job failed or cancelled, and SETTLE_DEPENDENTS after
        it in the same transaction (one pipeline, one round trip): the job's row is locked by
        then, so no child can be added to it, and the second statement's snapshot sees every
        edge. A job without dependents is settled by a read of its own row."""

        def run() -> dict[str, Any] | None:
            with self._connection() as conn:
                with conn.pipeline():
                    ended = conn.execute(statement, params)
                    conn.execute(KEY_LOOKUP_PLANNER)  # for SETTLE_DEPENDENTS (workflows.sql, ``waiting``)
                    conn.execute(SETTLE_DEPENDENTS, self._params(ids=[lease.job_id]))
                return ended.fetchone()

        return self._retrying(run)

    def _receipt(self, lease: Lease) -> dict[str, Any] | None:
        """The attempt's row, read when a fenced write matched nothing (see checks.receipt)."""
        return self._fetchone(READ_ATTEMPT_RECEIPT, self._params(**fence(lease)), replay=True)


def _completion_batch(finished: Sequence[Completion], max_result_bytes: int) -> str:
    """COMPLETE_JOBS's batch parameter: one JSON document, in the (id) order given."""
    bodies = checks.completion_bodies(finished, max_result_bytes)
    result_ids = new_job_ids(len(finished))  # one read of randomness for the batch, not one a job
    return json.dumps(
        [
            {
                "job_id": str(item.lease.job_id),
                "claim": item.lease.claim,
                "attempt": item.lease.attempt,
                "owner": item.lease.owner,
                "result_id": str(result_id),
                "body": body,  # JSON text in a JSON string: a null result stays JSON null
                "done": item.done,
                "total": item.total,
            }
            for item, body, result_id in zip(finished, bodies, result_ids, strict=True)
        ]
    )
