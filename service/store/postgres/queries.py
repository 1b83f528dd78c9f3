"""The PostgreSQL store's reads: statuses, lists, the dead-letter path, metrics,
workers and tokens. Each reads an index's window, never the whole history.
"""

from collections.abc import Generator, Sequence
from typing import Any

from service.jobs import JSON, JobStatus
from service.store import checks
from service.store.postgres.steps import QueryEach, Step
from service.store.sqlfiles import statements

_SQL = statements("postgres")


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
HEALTH_STATS = _SQL["health_stats"]
LIST_WORKERS = _SQL["list_workers"]
TENANT_FOR_TOKEN = _SQL["tenant_for_token"]
ADMIN_TOKEN = _SQL["admin_token"]
GET_JOB_FOR_TOKEN = _SQL["get_job_for_token"]
READ_STATUSES = _SQL["read_statuses"]
LIST_TOKENS = _SQL["list_tokens"]
LIST_LIMITS = _SQL["list_limits"]
SCOPE_USAGE = _SQL["scope_usage"]
EXPLAIN_FACTS = _SQL["explain_facts"]
RUNNING_IN_SCOPE = _SQL["running_in_scope"]
LIST_ITEMS = _SQL["list_items"]
LIST_FAILED_ITEMS = _SQL["list_failed_items"]


def payload_steps(stored: Sequence[JobStatus]) -> Generator[Step, list[Any], list[JSON]]:
    """The stored jobs' payloads, GET_PAYLOAD each, sent together (one round trip)."""
    if not stored:
        return []
    rows = yield QueryEach(GET_PAYLOAD, [{"job_id": job.id, "tenant": job.tenant} for job in stored])
    return [checks.found(row, job.id)["payload"] for row, job in zip(rows, stored, strict=True)]
