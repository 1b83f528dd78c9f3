from service.store.sqlfiles import statements

_SQL = statements("sqlite")
"""The SQLite store's hot path: the worker's statements from claim to finish (claim,
heartbeat, complete, fail, release, cancel acknowledged), each named, with the
invariant it keeps. The other areas keep their statements beside their operations (submit.py,
ops.py, maintenance.py, limits.py, items.py, tokens.py, workers.py), with the reads
that serve only them; the reads of the API, the CLI and the console are in queries.py.

Every write runs under ``BEGIN IMMEDIATE`` (see store.py), so a read and the
update that follows it cannot interleave with another process's write.
"""

NOW = _SQL["clock"]


# -- claim_jobs --
# The claim is the fair, limited pick below (NEXT_TENANT ... COUNT_STARTS), then CLAIM_JOB
# per picked job. Invariant 1: BEGIN IMMEDIATE holds the write lock from the first read to
# the last update, so no other claimer can pick the same row. attempts + 1 and the lease
# are set in the same statement: the fencing token is born with the claim. Invariant 2:
# the lease expiry is computed from the clock read under the lock.

OPEN_ATTEMPT = _SQL["open_attempt"]


RENEW_LEASE = _SQL["renew_lease"]


COMPLETE_JOBS = _SQL["complete_jobs"]

STORE_RESULT = _SQL["store_result"]

FAIL_JOB = _SQL["fail_job"]

RELEASE_JOB = _SQL["release_job"]

ACKNOWLEDGE_CANCEL = _SQL["acknowledge_cancel"]

CLOSE_ATTEMPT = _SQL["close_attempt"]

READ_ATTEMPT_RECEIPT = _SQL["read_attempt_receipt"]


# -- the fair claim, limited (see store.py claim; PostgreSQL's CLAIM_JOBS says what it keeps) --
# BEGIN IMMEDIATE makes the claim the only writer from its first read to its commit, so
# the counters it reads are exact and no other claim or finish moves them meanwhile.

NEXT_TENANT = _SQL["next_tenant"]

TENANT_JOBS = _SQL["tenant_jobs"]

TENANT_RUNNING = _SQL["tenant_running"]

TENANT_WEIGHT = _SQL["tenant_weight"]

DEFAULT_TENANT_LIMITED = _SQL["default_tenant_limited"]

COUNTERS = _SQL["counters"]

CLAIM_JOB = _SQL["claim_job"]

COUNT_STARTS = _SQL["count_starts"]

GIVE_BACK = _SQL["give_back"]

TENANT_COUNTER = _SQL["tenant_counter"]
