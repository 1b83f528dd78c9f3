"""The hot path's SQL as the databases receive it, checked in under tests/store/golden/.

The statements are written in .sql files with fragments ({{room(c)}}, {{scopes(p)}}, ...)
that the loader (service.store.sqlfiles) expands. A change to a fragment changes every
statement that includes it; these files make that change a diff in review, statement
by statement, in the text the database plans.

When a change is meant, regenerate the files and commit them with it:

    JOBQ_REGENERATE_GOLDEN=1 .venv/bin/python -m pytest tests/store/test_golden_sql.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.store.sqlfiles import Dialect, statements

GOLDEN = Path(__file__).parent / "golden"
REGENERATE = "JOBQ_REGENERATE_GOLDEN"

# The worker's hot path on each store: claim, heartbeat, complete, fail, release, cancel
# acknowledged, and the reaper's statement.
HOT_PATH: dict[Dialect, tuple[str, ...]] = {
    "postgres": (
        "claim_jobs",
        "claim_planner",
        "renew_lease",
        "complete_jobs",
        "fail_job",
        "release_job",
        "acknowledge_cancel",
        "reap_expired",
    ),
    "sqlite": (
        "next_tenant",
        "tenant_jobs",
        "claim_job",
        "count_starts",
        "open_attempt",
        "renew_lease",
        "complete_jobs",
        "fail_job",
        "release_job",
        "acknowledge_cancel",
        "give_back",
        "close_attempt",
        "reap_expired",
    ),
}
CASES = [(dialect, name) for dialect, names in HOT_PATH.items() for name in names]


@pytest.mark.parametrize(("dialect", "name"), CASES, ids=[f"{d}-{n}" for d, n in CASES])
def test_the_expanded_hot_path_sql_matches_its_checked_in_text(dialect: Dialect, name: str) -> None:
    path = GOLDEN / dialect / f"{name}.sql"
    text = statements(dialect)[name]
    if os.environ.get(REGENERATE):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing: run with {REGENERATE}=1 (see this module's docstring)"
    assert text == path.read_text(encoding="utf-8"), (
        f"the {dialect} statement {name} changed: review the diff of {path.relative_to(GOLDEN.parent)} after"
        f" regenerating it with {REGENERATE}=1 .venv/bin/python -m pytest tests/store/test_golden_sql.py"
    )


def test_every_golden_file_names_a_hot_path_statement() -> None:
    on_disk = {(path.parent.name, path.stem) for path in GOLDEN.glob("*/*.sql")}
    assert on_disk == set(CASES), "a golden file without its statement (or the reverse): regenerate and delete"
