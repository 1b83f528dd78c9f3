"""API tokens on PostgreSQL: created (only the hash is stored), looked up, revoked, listed."""

from __future__ import annotations

import uuid

from service.jobs import ApiToken, new_job_id
from service.payloads import token_tenant
from service.store import checks
from service.store.postgres.connection import READ, Connected
from service.store.postgres.queries import ADMIN_TOKEN, LIST_TOKENS, TENANT_FOR_TOKEN
from service.store.rows import api_token
from service.store.sqlfiles import statements

_SQL = statements("postgres")

CREATE_TOKEN = _SQL["create_token"]
REVOKE_TOKEN = _SQL["revoke_token"]


class Tokens(Connected):
    """The API's tokens."""

    def create_token(
        self, tenant: str, token_hash: str, name: str | None = None, admin: bool = False, read_only: bool = False
    ) -> ApiToken:
        tenant = token_tenant(tenant, token_hash, admin)
        row = self._fetchone(
            CREATE_TOKEN,
            self._params(
                id=new_job_id(), tenant=tenant, name=name, token_hash=token_hash, admin=admin, read_only=read_only
            ),
        )
        assert row is not None  # INSERT … RETURNING always returns the row
        return api_token(row, READ)

    def tenant_for_token(self, token_hash: str) -> str | None:
        row = self._fetchone(TENANT_FOR_TOKEN, self._params(token_hash=token_hash), replay=True)
        return row["tenant"] if row else None

    def admin_token(self, token_hash: str) -> ApiToken | None:
        row = self._fetchone(ADMIN_TOKEN, self._params(token_hash=token_hash), replay=True)
        return api_token(row, READ) if row else None

    def revoke_token(self, token_id: uuid.UUID) -> ApiToken:
        return api_token(checks.revoked(self._fetchone(REVOKE_TOKEN, self._params(id=token_id)), token_id), READ)

    def list_tokens(self, tenant: str | None = None) -> list[ApiToken]:
        return [api_token(row, READ) for row in self._fetchall(LIST_TOKENS, self._params(tenant=tenant), replay=True)]
