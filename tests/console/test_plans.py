"""Every query behind a console page reads an index, never the whole history, on both stores
(the seeded history and the plan reading: tests/plans.py)."""

from __future__ import annotations

from typing import Any

import pytest

from service.store.postgres import console as pg_console
from service.store.postgres import queries as pg
from service.store.sqlite import console as lite_console
from service.store.sqlite import queries as lite
from tests.conftest import Database
from tests.plans import full_scans, seed

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
