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
