"""Who calls ``/v1``: the one reading of the ``Authorization`` header.

Every route, and the status poll's fast path (:mod:`service.api.fast_poll`),
authenticates through :func:`identify`; :func:`tenant_of` then looks the token
up when the route needs its tenant before it reads. Missing, malformed,
unknown and revoked tokens, and an operator's admin token (the console's, which
the store never answers for ``/v1``), all get the same 401, so a caller cannot
tell which. The token rules themselves live in :mod:`service.tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool

from service.errors import Unauthorized
from service.store import Store
from service.tokens import hash_token, plausible

DEFAULT_TENANT = "default"
"""The tenant everything belongs to when JOBQ_AUTH=off (and NewJob's default)."""

UNAUTHORIZED_MESSAGE = (
    "a valid API token is required: send 'Authorization: Bearer <token>' "
    "(create one with `jobq token create --tenant NAME`)"
)


def unauthorized() -> Unauthorized:
    """The one 401 error, the same whatever was wrong with the token."""
    return Unauthorized(UNAUTHORIZED_MESSAGE)


@dataclass(frozen=True)
class Caller:
    """Who calls: a tenant already known (auth off, or the token looked up), or the hash of a
    token whose lookup is still to make (a status read makes it in the same query as the read)."""

    tenant: str | None = None
    token_hash: str | None = None

    def __post_init__(self) -> None:
        if (self.tenant is None) == (self.token_hash is None):
            raise ValueError("a caller is a tenant or a token's hash, one of the two")


def identify(authorization: str | None, auth: bool) -> Caller:
    """The caller an ``Authorization`` header names, split as ``fastapi.security.HTTPBearer`` splits it.

    Raises the one 401 for anything that cannot be a token of ours, before any lookup."""
    if not auth:
        return Caller(tenant=DEFAULT_TENANT)
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not plausible(token):
        raise unauthorized()
    return Caller(token_hash=hash_token(token))


async def tenant_of(caller: Caller, store: Store) -> str:
    """The caller's tenant, looking the token up if it was not yet (off the event loop)."""
    if caller.tenant is not None:
        return caller.tenant
    assert caller.token_hash is not None  # one of the two (__post_init__)
    tenant = await run_in_threadpool(store.tenant_for_token, caller.token_hash)
    if tenant is None:  # unknown, revoked, or an admin token
        raise unauthorized()
    return tenant
