"""Analyst logins for tests: deploy/analysts.sql applied, a login role granted jobq_analyst.

Roles belong to the whole server, not to the test's database: each login gets a
unique name and is dropped when the test is done. ``jobq_analyst`` itself stays
(it holds no privilege outside the test databases, which are dropped).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

ROLE_SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "analysts.sql"


def apply_role_script(owner_url: str, settings: Mapping[str, str] | None = None) -> None:
    """Run deploy/analysts.sql as the tables' owner (psycopg sends it as one simple query),
    after ``SET name = value`` of each of ``settings`` in the same session, as the script's
    header tells an administrator to choose the guard rails' values."""
    with psycopg.connect(owner_url, autocommit=True) as conn:
        for name, value in (settings or {}).items():
            conn.execute("SELECT set_config(%s, %s, false)", [name, value])
        conn.execute(ROLE_SCRIPT.read_text())  # type: ignore[arg-type]  # a script of our own, no parameters


@contextmanager
def analyst_role(owner_url: str) -> Iterator[tuple[str, str]]:
    """A new login role in jobq_analyst (its name, and a URL that logs in as it), dropped after."""
    name = f"jobq_test_analyst_{secrets.token_hex(6)}"
    password = secrets.token_urlsafe(18)
    with psycopg.connect(owner_url, autocommit=True) as admin:
        # CREATE ROLE takes no parameters; the name is ours and the password url-safe.
        admin.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}' IN ROLE jobq_analyst")  # type: ignore[arg-type]
        try:
            yield name, make_url(owner_url).set(username=name, password=password).render_as_string(hide_password=False)
        finally:
            admin.execute(f"DROP ROLE IF EXISTS {name}")  # type: ignore[arg-type]


@contextmanager
def analyst_login(owner_url: str) -> Iterator[tuple[str, psycopg.Connection[Any]]]:
    """A new login role in jobq_analyst, and an open autocommit connection as it."""
    with analyst_role(owner_url) as (name, url), psycopg.connect(url, autocommit=True) as conn:
        yield name, conn
