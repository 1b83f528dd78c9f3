"""Fixtures of the console tests: the real API app under uvicorn (tests/api), an admin token."""

from __future__ import annotations

from service.tokens import hash_token, new_token
from tests.api.conftest import LiveApi, api, start_api, start_worker  # noqa: F401  (fixtures)


def admin_token(live: LiveApi, name: str = "alice") -> str:
    """A fresh operator's token, made the way `jobq token create --admin` makes one."""
    token = new_token()
    live.store.create_token("", hash_token(token), name, admin=True)
    return token
