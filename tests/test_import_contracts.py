"""The migrations' import contract (tests/import_contracts.py) sees what lint-imports cannot:
it breaks on a migration that imports live code, wherever the import sits, and on a folder
it finds empty; the contract pyproject.toml declares reads every real migration."""

from __future__ import annotations

import tomllib
from pathlib import Path

from grimp import ImportGraph

from tests.import_contracts import FolderImportsContract, IllegalImport, imported_names

ROOT = Path(__file__).resolve().parents[1]

FROZEN = """
import json
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql
"""
LIVE = """
from alembic import op
from service.maintenance.rollup import BUCKET_BOUNDS


def upgrade():
    from service.store.sqlite import rollup
    import service.worker
    from . import helpers
"""


def contract(folder: Path, allowed: list[str]) -> FolderImportsContract:
    options = {"folder": str(folder), "package": "migrations", "allowed_modules": allowed}
    return FolderImportsContract(name="frozen", session_options={}, contract_options=options)


def test_a_migration_that_imports_live_code_breaks_the_contract_wherever_the_import_sits(tmp_path: Path) -> None:
    (tmp_path / "0001_frozen.py").write_text(FROZEN)
    (tmp_path / "0002_live.py").write_text(LIVE)

    check = contract(tmp_path, ["alembic", "sqlalchemy"]).check(ImportGraph(), verbose=False)

    assert not check.kept
    assert check.metadata["illegal"] == [
        IllegalImport("migrations.0002_live", "service.maintenance.rollup.BUCKET_BOUNDS", 3),
        IllegalImport("migrations.0002_live", "service.store.sqlite.rollup", 7),
        IllegalImport("migrations.0002_live", "service.worker", 8),
        IllegalImport("migrations.0002_live", ".helpers", 9),
    ]


def test_a_module_named_as_allowed_allows_what_it_contains(tmp_path: Path) -> None:
    (tmp_path / "0001_domain.py").write_text("from service.jobs import JobState\nfrom service import jobs\n")
    assert contract(tmp_path, ["service.jobs"]).check(ImportGraph(), verbose=False).kept
    assert not contract(tmp_path, ["service.job"]).check(ImportGraph(), verbose=False).kept


def test_a_folder_with_no_module_breaks_the_contract(tmp_path: Path) -> None:
    check = contract(tmp_path / "nowhere", ["alembic"]).check(ImportGraph(), verbose=False)
    assert not check.kept and check.metadata["empty"]


def test_the_declared_contract_reads_every_migration_and_is_kept() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [options] = [c for c in config["contracts"] if c["type"] == FolderImportsContract.type_name]
    migrations = sorted((ROOT / options["folder"]).glob("*.py"))
    assert len(migrations) >= 8 and all(imported_names(path) for path in migrations)

    declared = contract(ROOT / options["folder"], options["allowed_modules"])
    check = declared.check(ImportGraph(), verbose=False)
    assert check.kept, check.metadata["illegal"]
