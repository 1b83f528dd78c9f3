"""The package list in pyproject.toml names every package under service/ (setuptools
cannot combine a list, needed to map alembic/ into the package, with find)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_under_service_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "service").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert on_disk - listed == set(), "packages missing from [tool.setuptools] packages"
    assert listed - on_disk == {"service.alembic", "service.alembic.versions"}


def test_the_alembic_folder_sits_beside_alembic_ini_with_no_package_init():
    # An alembic/__init__.py would shadow the Alembic library for `python -m pytest` run from here.
    assert (ROOT / "alembic.ini").is_file()
    assert (ROOT / "alembic" / "env.py").is_file() and (ROOT / "alembic" / "script.py.mako").is_file()
    assert not (ROOT / "alembic" / "__init__.py").exists()


def test_every_runtime_dependency_stops_below_its_next_major_version() -> None:
    """Issue 26: FastAPI 0.165 reached users through an open-ended `>=` and emptied every 405's
    Allow header. Each runtime dependency has an upper bound, at most its next major (1.0 for a 0.x)."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dependency in map(Requirement, project["dependencies"]):
        uppers = [Version(spec.version) for spec in dependency.specifier if spec.operator == "<"]
        lowers = [Version(spec.version) for spec in dependency.specifier if spec.operator == ">="]
        assert uppers and lowers, f"{dependency} needs a lower and an upper bound"
        next_major = Version(f"{lowers[0].major + 1}")
        assert uppers[0] <= next_major, f"{dependency}: the bound must exclude the next major ({next_major})"
