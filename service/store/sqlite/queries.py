"""The SQLite store's reads: statuses, lists, the dead-letter path, metrics,
workers and tokens.
"""

from service.store import checks
from service.store.sqlfiles import statements

_SQL = statements("sqlite")


GET_JOB = _SQL["get_job"]
GET_RESULT = _SQL["get_result"]
RESULT_SIZE = _SQL["result_size"]
RESULT_CHUNK = _SQL["result_chunk"]
GET_PAYLOAD = _SQL["get_payload"]
LIST_JOBS = _SQL["list_jobs"]
LIST_ALL_JOBS = _SQL["list_all_jobs"]
JOB_LISTINGS = checks.listing_statements(_SQL)
JOB_ATTEMPTS = _SQL["job_attempts"]
RUNNING_JOBS = _SQL["running_jobs"]
FAILURE_GROUPS = _SQL["failure_groups"]
OUTCOMES = _SQL["outcomes"]
LEASE_EXPIRIES = _SQL["lease_expiries"]
DURATION_BUCKETS = _SQL["duration_buckets"]
PICKUP_BUCKETS = _SQL["pickup_buckets"]
THROUGHPUT = _SQL["throughput"]
QUEUE_STATS = _SQL["queue_stats"]
ACTIVE_COUNTS = _SQL["active_counts"]
LIST_WORKERS = _SQL["list_workers"]
TENANT_FOR_TOKEN = _SQL["tenant_for_token"]
ADMIN_TOKEN = _SQL["admin_token"]
LIST_TOKENS = _SQL["list_tokens"]
LIST_LIMITS = _SQL["list_limits"]
SCOPE_USAGE = _SQL["scope_usage"]
EXPLAIN_FACTS = _SQL["explain_facts"]
RUNNING_IN_SCOPE = _SQL["running_in_scope"]
JOB_EXISTS = _SQL["job_exists"]
LIST_ITEMS = _SQL["list_items"]
LIST_FAILED_ITEMS = _SQL["list_failed_items"]
