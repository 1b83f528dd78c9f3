"""The PostgreSQL store's hot path: the worker's statements from claim to finish
(claim, heartbeat, complete, fail, release, cancel acknowledged), by the names the store
uses. Their SQL, each with the invariant it keeps, is in sql/claim.sql (the claim, read
top to bottom) and sql/statements.sql; the pieces they share (a slot given back, a
job's scopes, the room in a scope) are fragments in sql/limits.sql and
service/store/sql/scopes.sql, expanded by service.store.sqlfiles. The other areas keep
their statements beside their operations (submit, ops, maintenance, limits, items,
tokens, workers: a module and a .sql file of the same name each); the reads of the API,
the CLI and the console are in queries.py.

Each is a single statement (data-modifying CTEs), so claim, heartbeat, complete,
fail and reap are one round trip each and never hold a transaction open while a
handler runs. ``:now`` is NULL in production, so ``coalesce`` picks the database
clock (the ``now`` fragment); tests pass a pinned instant instead.
"""

from service.store.sqlfiles import statements

_SQL = statements("postgres")


CLAIM_JOBS = _SQL["claim_jobs"]
RENEW_LEASE = _SQL["renew_lease"]
REFILL_LOCK_TIMEOUT = _SQL["refill_lock_timeout"]
REFILL_LOCK_TIMEOUT_END = _SQL["refill_lock_timeout_end"]
CLAIM_PLANNER = _SQL["claim_planner"]
KEY_LOOKUP_PLANNER = _SQL["key_lookup_planner"]
HAS_CLAIMABLE = _SQL["has_claimable"]
COMPLETE_JOBS = _SQL["complete_jobs"]
FAIL_JOB = _SQL["fail_job"]
RELEASE_JOB = _SQL["release_job"]
ACKNOWLEDGE_CANCEL = _SQL["acknowledge_cancel"]
READ_ATTEMPT_RECEIPT = _SQL["read_attempt_receipt"]
