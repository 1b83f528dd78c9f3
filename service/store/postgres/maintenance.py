"""What every worker runs besides its jobs, on PostgreSQL: the reaper of expired leases
(REAP_EXPIRED), the pruner (retention), the daily rollup's fold (its SQL in rollup.py),
and the database's health figures."""

from __future__ import annotations

from collections.abc import Sequence

from service.jobs import LEASE_EXPIRED_ERROR, LEASE_EXPIRED_GROUP, ReapResult
from service.store import checks
from service.store.base import PRUNE_BATCH, REAP_BATCH, ROLLUP_BATCH, DatabaseHealth, LeaderLease
from service.store.postgres.leadership import Fenced
from service.store.postgres.queries import HEALTH_STATS
from service.store.postgres.rollup import FOLD_ROLLUP
from service.store.postgres.statements import NOTIFY_CHANGED, give_back

# -- reap_expired --
# Invariant 2: a running job past its lease is reclaimed. Leaderless and
# idempotent: SKIP LOCKED lets every worker run it at once without waiting or
# double-reaping, rows lock in id order, and a batch is bounded. Attempts were
# charged at claim, so a job that kills its worker every time fails after
# max_attempts with an error that says the lease expired (invariant 3): the text is
# service.jobs.LEASE_EXPIRED_ERROR, given as %(lease_expired_error)s.
# Expiry is compared with the database clock, never a worker's. An expired
# lease is a retryable failure: while attempts remain (the retry budget, as in
# service.retry.decide) the job is due after %(delays)s[attempts], the delays the
# caller drew for each attempt number; the backoff itself is decided in Python.
REAP_EXPIRED = (
    """
WITH n AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS ts
),
expired AS (
    SELECT j.id, j.attempts, j.max_attempts, j.lease_owner, j.cancel_requested,
           (SELECT count(*) FROM job_attempts AS a
            WHERE a.job_id = j.id AND a.outcome = 'lease_expired') + 1 AS expiries
    FROM jobs AS j
    WHERE j.state = 'running' AND j.lease_expires_at < (SELECT ts FROM n)
    ORDER BY j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
reaped AS (
    UPDATE jobs AS j
    SET state = CASE WHEN e.cancel_requested THEN 'cancelled'
                     WHEN e.attempts < e.max_attempts THEN 'queued'
                     ELSE 'failed' END,
        error = CASE WHEN e.cancel_requested THEN j.error
                     ELSE format(%(lease_expired_error)s, e.expiries, e.attempts, e.max_attempts, e.lease_owner) END,
        error_group = CASE WHEN e.cancel_requested THEN j.error_group ELSE %(lease_expired)s END,
        run_after = CASE WHEN NOT e.cancel_requested AND e.attempts < e.max_attempts
                         THEN n.ts + make_interval(secs => (%(delays)s::float8[])[e.attempts])
                         ELSE j.run_after END,
        lease_owner = CASE WHEN NOT e.cancel_requested AND e.attempts < e.max_attempts
                           THEN NULL ELSE j.lease_owner END,
        lease_expires_at = NULL,
        finished_at = CASE WHEN NOT e.cancel_requested AND e.attempts < e.max_attempts
                           THEN NULL ELSE n.ts END,
        updated_at = n.ts
    FROM expired AS e, n
    WHERE j.id = e.id
    RETURNING j.id, j.state, j.claims, j.tenant, j.kind, j.queue, j.concurrency_key, """
    + NOTIFY_CHANGED
    + """
),"""
    + give_back("reaped")
    + """,
closed AS (
    UPDATE job_attempts AS a
    SET finished_at = n.ts, outcome = 'lease_expired', error = %(lease_expired)s
    FROM reaped AS r, n
    WHERE a.job_id = r.id AND a.claim = r.claims AND a.finished_at IS NULL
)
SELECT state, count(*) AS jobs FROM reaped GROUP BY state
"""
)

# -- prune_finished --
# Retention: terminal jobs finished before the cutoff, oldest first, a small batch
# at a time; attempts, results and replays go with them (ON DELETE CASCADE).
# SKIP LOCKED: pruning never waits on, or blocks, anything a worker holds.
PRUNE_FINISHED = """
WITH doomed AS (
    SELECT id
    FROM jobs
    WHERE finished_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(older_than)s)
      AND state IN ('succeeded', 'failed', 'cancelled')
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM jobs USING doomed WHERE jobs.id = doomed.id
"""


# -- prune_rollup --
# Retention of the daily rollup, kept longer than the jobs it counts: whole UTC days
# that ended before the cutoff, counts and histograms in one statement (both tables'
# keys lead with the day). Never touches a day still being folded.
PRUNE_ROLLUP = """
WITH cutoff AS (
    SELECT ((coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(older_than)s)) AT TIME ZONE 'UTC')::date
           AS day
),
counts AS (
    DELETE FROM job_daily_rollup WHERE day < (SELECT day FROM cutoff) RETURNING day
),
histograms AS (
    DELETE FROM job_daily_histogram WHERE day < (SELECT day FROM cutoff) RETURNING day
)
SELECT (SELECT count(*) FROM counts) + (SELECT count(*) FROM histograms) AS deleted
"""


COUNT_PRUNABLE = """
SELECT count(*) AS count
FROM jobs
WHERE finished_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(older_than)s)
  AND state IN ('succeeded', 'failed', 'cancelled')
"""


class Maintenance(Fenced):
    """reap, prune, prune_rollup, count_prunable, fold_rollup, health_stats; the writes fenced by ``leader``."""

    def reap(
        self, delays: Sequence[float], limit: int = REAP_BATCH, *, leader: LeaderLease | None = None
    ) -> ReapResult:
        params = self._params(
            limit=limit,
            lease_expired=LEASE_EXPIRED_GROUP,
            lease_expired_error=LEASE_EXPIRED_ERROR,
            delays=checks.reap_delays(delays),
        )
        rows = self._fenced(leader, lambda conn: conn.execute(REAP_EXPIRED, params).fetchall())
        return checks.reap_result({row["state"]: row["jobs"] for row in rows})

    def prune(self, older_than_seconds: float, limit: int = PRUNE_BATCH, *, leader: LeaderLease | None = None) -> int:
        params = self._params(older_than=float(older_than_seconds), limit=limit)
        return self._fenced(leader, lambda conn: conn.execute(PRUNE_FINISHED, params).rowcount)

    def prune_rollup(self, older_than_seconds: float, *, leader: LeaderLease | None = None) -> int:
        params = self._params(older_than=float(older_than_seconds))
        row = self._fenced(leader, lambda conn: conn.execute(PRUNE_ROLLUP, params).fetchone())
        return int(row["deleted"]) if row else 0

    def count_prunable(self, older_than_seconds: float) -> int:
        row = self._fetchone(COUNT_PRUNABLE, self._params(older_than=float(older_than_seconds)))
        return int(row["count"]) if row else 0

    def fold_rollup(
        self,
        bounds: Sequence[float],
        bucket_seconds: Sequence[float],
        settle_seconds: float,
        limit: int = ROLLUP_BATCH,
        *,
        leader: LeaderLease | None = None,
    ) -> int:
        params = self._params(
            bounds=list(bounds), bucket_seconds=list(bucket_seconds), settle=float(settle_seconds), limit=limit
        )
        row = self._fenced(leader, lambda conn: conn.execute(FOLD_ROLLUP, params).fetchone())
        return int(row["folded"]) if row else 0

    def health_stats(self) -> DatabaseHealth:
        row = self._fetchone(HEALTH_STATS, {})
        if row is None:
            return DatabaseHealth(jobs_dead_tuples=None, oldest_transaction_age_seconds=None)
        dead = row["jobs_dead_tuples"]
        return DatabaseHealth(
            jobs_dead_tuples=int(dead) if dead is not None else None,
            oldest_transaction_age_seconds=float(row["oldest_transaction_age_seconds"]),
        )
