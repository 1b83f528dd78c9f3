"""The SQLite store's hot path: the worker's statements from claim to finish (claim,
heartbeat, complete, fail, release, cancel acknowledged), by the names the store uses.
Their SQL, each with the invariant it keeps, is in sql/statements.sql (and the
dialect-neutral service/store/sql/), read by service.store.sqlfiles. The other areas keep
their statements beside their operations (a module and a .sql file of the same name
each); the reads of the API, the CLI and the console are in queries.py.

Every write runs under ``BEGIN IMMEDIATE`` (see store.py), so a read and the
update that follows it cannot interleave with another process's write.
"""

from service.store.sqlfiles import statements

_SQL = statements("sqlite")

NOW = _SQL["clock"]


HAS_CLAIMABLE = _SQL["has_claimable"]
OPEN_ATTEMPT = _SQL["open_attempt"]
RENEW_LEASE = _SQL["renew_lease"]
COMPLETE_JOBS = _SQL["complete_jobs"]
STORE_RESULT = _SQL["store_result"]
FAIL_JOB = _SQL["fail_job"]
RELEASE_JOB = _SQL["release_job"]
ACKNOWLEDGE_CANCEL = _SQL["acknowledge_cancel"]
CLOSE_ATTEMPT = _SQL["close_attempt"]
READ_ATTEMPT_RECEIPT = _SQL["read_attempt_receipt"]


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
