"""What the API's routes get injected beyond :mod:`service.web`'s: the caller, the tenant,
and the check that refuses unknown query parameters.

Everything lives on ``app.state``, put there by :func:`service.app.create_app`
and its lifespan; nothing is a module-level global.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.api.auth import Caller, identify, tenant_of
from service.errors import InvalidInput
from service.web import MAX_TAG_LENGTH, SettingsDep, StoreDep

bearer = HTTPBearer(
    auto_error=False,
    description="An API token from `jobq token create --tenant NAME`, sent as `Authorization: Bearer <token>`.",
)
"""Declares the scheme in the OpenAPI document; the header itself is read by :func:`service.api.auth.identify`."""


async def get_caller(
    request: Request, settings: SettingsDep, _scheme: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> Caller:
    """Who calls, as :func:`identify` reads it (the same 401 for anything that is not a token of ours)."""
    return identify(request.headers.get("authorization"), settings.auth)


CallerDep = Annotated[Caller, Depends(get_caller)]


async def get_tenant(caller: CallerDep, store: StoreDep) -> str:
    """The tenant of the request's bearer token. The same 401 for missing, bad, revoked and admin tokens."""
    return await tenant_of(caller, store)


TenantDep = Annotated[str, Depends(get_tenant)]


async def get_poller(request: Request, caller: CallerDep, store: StoreDep) -> Caller:
    """The caller of ``GET /v1/jobs/{id}``, the route clients call most: a plain poll leaves the
    token's lookup to the status read, which makes both in one query (as the fast path does).

    A request FastAPI would refuse with a 422 (a malformed id, ``wait`` or ``If-None-Match``)
    gets its lookup here, so a bad token is still answered 401 before anything else.
    """
    if _plain_poll(request):
        return caller
    return Caller(tenant=await tenant_of(caller, store))


def _plain_poll(request: Request) -> bool:
    """No long poll, and nothing that fails validation."""
    if "wait" in request.query_params or len(request.headers.get("if-none-match", "")) > MAX_TAG_LENGTH:
        return False
    try:
        uuid.UUID(str(request.path_params.get("job_id", "")))
    except ValueError:
        return False
    return True


PollerDep = Annotated[Caller, Depends(get_poller)]


async def no_unknown_query_parameters(request: Request) -> None:
    """Query parameters, like bodies, forbid what the endpoint does not define: a typo
    (``?stat=failed``) or a repeated parameter is a 422, not a filter silently ignored."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    known = _query_names(dependant)
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        expected = ", ".join(sorted(known)) or "none"
        raise InvalidInput(f"unknown query parameter(s): {', '.join(unknown)} (this endpoint takes: {expected})")
    repeated = sorted(name for name in set(request.query_params) if len(request.query_params.getlist(name)) > 1)
    if repeated:  # every parameter takes one value; FastAPI would silently keep the last
        raise InvalidInput(f"query parameter(s) given more than once: {', '.join(repeated)}")


def _query_names(dependant: Any) -> set[str]:
    """The query parameters an endpoint and its dependencies declare."""
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names
