"""API tokens on SQLite: created (only the hash is stored), looked up, revoked, listed."""

from __future__ import annotations

import uuid

from service.jobs import ApiToken, new_job_id
from service.payloads import token_tenant
from service.store import checks
from service.store.rows import api_token
from service.store.sqlfiles import statements
from service.store.sqlite.connection import READ, Connected
from service.store.sqlite.queries import ADMIN_TOKEN, LIST_TOKENS, TENANT_FOR_TOKEN

_SQL = statements("sqlite")

CREATE_TOKEN = _SQL["create_token"]
REVOKE_TOKEN = _SQL["revoke_token"]


class Tokens(Connected):
    """The API's tokens."""

    def create_token(
        self, tenant: str, token_hash: str, name: str | None = None, admin: bool = False, read_only: bool = False
    ) -> ApiToken:
        tenant = token_tenant(tenant, token_hash, admin)
        with self._write() as (conn, now):
            row = conn.execute(
                CREATE_TOKEN,
                {
                    "id": str(new_job_id()),
                    "tenant": tenant,
                    "name": name,
                    "token_hash": token_hash,
                    "admin": admin,
                    "read_only": read_only,
                    "now": now,
                },
            ).fetchone()
        return api_token(row, READ)

    def tenant_for_token(self, token_hash: str) -> str | None:
        with self._read() as (conn, _now):
            row = conn.execute(TENANT_FOR_TOKEN, {"token_hash": token_hash}).fetchone()
        return row["tenant"] if row else None

    def admin_token(self, token_hash: str) -> ApiToken | None:
        with self._read() as (conn, _now):
            row = conn.execute(ADMIN_TOKEN, {"token_hash": token_hash}).fetchone()
        return api_token(row, READ) if row else None

    def revoke_token(self, token_id: uuid.UUID) -> ApiToken:
        with self._write() as (conn, now):
            row = conn.execute(REVOKE_TOKEN, {"id": str(token_id), "now": now}).fetchone()
        return api_token(checks.revoked(row, token_id), READ)

    def list_tokens(self, tenant: str | None = None) -> list[ApiToken]:
        with self._read() as (conn, _now):
            rows = conn.execute(LIST_TOKENS, {"tenant": tenant}).fetchall()
        return [api_token(row, READ) for row in rows]
