"""Every query behind a console page reads an index, never the whole history, on both stores
(the seeded history and the plan reading: tests/plans.py)."""

from __future__ import annotations

from typing import Any

import pytest

from service.store.postgres import console as pg_console
from service.store.postgres import queries as pg
from service.store.postgres import workflows as pg_workflows
from service.store.sqlite import console as lite_console
from service.store.sqlite import queries as lite
from service.store.sqlite import workflows as lite_workflows
from tests.conftest import Database
from tests.plans import full_scans, seed, seeded_workflow

# page -> the statements it runs (by name, the same in both stores' query modules)
PAGES = {
    "overview": ["QUEUE_STATS", "THROUGHPUT", "LIST_WORKERS"],
    "jobs": ["LIST_ALL_JOBS", "LIST_JOBS"],
    "job": ["GET_JOB", "JOB_ATTEMPTS", "GET_PAYLOAD", "LIST_ITEMS", "LIST_FAILED_ITEMS"],
    "failures": ["FAILURE_GROUPS"],
    "workers": ["LIST_WORKERS", "RUNNING_JOBS"],
}


@pytest.mark.slow
def test_every_console_query_reads_an_index_not_the_history(db: Database, make_store: Any, store_url: str) -> None:
    job_id = seed(db, make_store, store_url)
    module = pg if db.dialect == "postgresql" else lite
    for page, names in PAGES.items():
        for name in names:
            scans, shown = full_scans(db, getattr(module, name), job_id)
            assert not scans, f"{page}: {name} reads {scans} whole\n{shown}"

    console_module = pg_console if db.dialect == "postgresql" else lite_console
    for name in ("JOB_IDS_IN_RANGE", "JOB_REPLAYS"):  # the job box's prefix, a job's history
        scans, shown = full_scans(db, getattr(console_module, name), job_id)
        assert not scans, f"job: {name} reads {scans} whole\n{shown}"

    # The job page's workflow progress: one workflow's slice of its own index, for any tenant or one.
    workflows = pg_workflows if db.dialect == "postgresql" else lite_workflows
    for tenant in (None, "t7"):
        given = {"workflow_id": seeded_workflow(db.dialect), "tenant": tenant}
        scans, shown = full_scans(db, workflows.WORKFLOW_PROGRESS, job_id, **given)
        assert not scans and "ix_jobs_workflow_id_id" in shown, f"job: WORKFLOW_PROGRESS {given}\n{shown}"


# The search's filter that picks each listing (service.store.checks.job_listing), as the console sends it.
SEARCHES = {
    "tenant": {"tenant": "t7"},
    "all": {"tenant": None, "kind": "k3"},
    "errored": {"tenant": None, "error_like": "%value%"},
    "by_idempotency_key": {"tenant": None, "idempotency_key": "order-300"},
    "by_concurrency_key": {"tenant": None, "concurrency_key": "c42"},
    "by_workflow": {"tenant": None, "workflow_id": "set in the test: the seed's, on each store"},
}


SEARCH_INDEXES = {
    "errored": "ix_jobs_errored_id",
    "by_idempotency_key": "ix_jobs_idempotency_key_id",
    "by_concurrency_key": "ix_jobs_concurrency_key_id",
    "by_workflow": "ix_jobs_workflow_id_id",
}


@pytest.mark.slow
def test_every_search_reads_an_index_for_its_pages_both_ways_and_its_capped_count(
    db: Database, make_store: Any, store_url: str
) -> None:
    job_id = seed(db, make_store, store_url)
    module = pg if db.dialect == "postgresql" else lite
    assert set(SEARCHES) == set(module.JOB_LISTINGS)
    for listing, filters in SEARCHES.items():
        if "workflow_id" in filters:
            filters = {**filters, "workflow_id": seeded_workflow(db.dialect)}
        page, newer, count = module.JOB_LISTINGS[listing]
        for what, statement, given in (
            ("page", page, {"after_id": job_id}),
            ("page before", newer, {"before_id": job_id}),
            ("count", count, {"limit": 10_001}),  # the console's cap + 1
            ("dated page", page, {"created_after": "2000-01-01", "created_before": "2100-01-01"}),
        ):
            scans, shown = full_scans(db, statement, job_id, **filters, **given)
            assert not scans, f"{listing} {what} reads {scans} whole\n{shown}"
            if listing in SEARCH_INDEXES:  # migrations 0014's and 0016's indexes are what these walk
                assert SEARCH_INDEXES[listing] in shown, f"{listing} {what}\n{shown}"


@pytest.mark.slow
def test_the_stats_charts_read_the_finished_window_and_the_rollup_not_the_history(
    db: Database, make_store: Any, store_url: str
) -> None:
    job_id = seed(db, make_store, store_url)
    module = pg_console if db.dialect == "postgresql" else lite_console
    for by in ("queue", "kind"):
        for name, given in (
            ("RECENT_OUTCOMES", {"window": 3600.0, "buckets": 12, "bucket_seconds": 300.0}),
            ("RECENT_OUTCOMES", {"window": 86_400.0, "buckets": 24, "bucket_seconds": 3600.0}),
            ("DAILY_OUTCOMES", {}),
        ):
            scans, shown = full_scans(db, getattr(module, name), job_id, by=by, **given)
            assert not scans, f"{name} by {by} {given} reads {scans} whole\n{shown}"
