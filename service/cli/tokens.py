"""API tokens: create (shown once), revoke, list."""

from __future__ import annotations

import sys
import uuid
from typing import Annotated

import typer

from service.cli.app import (
    app,
    iso,
    open_cli_store,
)
from service.errors import InvalidInput
from service.jobs import ADMIN_TENANT
from service.payloads import MAX_NAME_LENGTH

token_app = typer.Typer(help="API tokens: create (shown once), revoke, list.", no_args_is_help=True)
app.add_typer(token_app, name="token")


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(metavar="NAME", help="The tenant whose jobs the token may see.")] = None,
    name: Annotated[str | None, typer.Option(metavar="TEXT", help="A note: who or what uses it.")] = None,
    admin: Annotated[
        bool, typer.Option("--admin", help="An operator's token for the console at /ui (every tenant); /v1 refuses it.")
    ] = False,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="With --admin: an operator who may look at the console, not act.")
    ] = False,
) -> None:
    """Create an API token and print it once on stdout; only its SHA-256 is stored."""
    from service.tokens import hash_token, new_token

    if admin == (tenant is not None):
        raise InvalidInput("give either --tenant NAME (an API token) or --admin (an operator's console token)")
    if tenant is not None and (not tenant.strip() or len(tenant) > MAX_NAME_LENGTH or tenant == ADMIN_TENANT):
        raise InvalidInput(
            f"--tenant must be a non-empty name of at most {MAX_NAME_LENGTH} characters, not {ADMIN_TENANT!r}"
        )
    if read_only and not admin:
        raise InvalidInput("--read-only is for an operator's token: give --admin too")
    token = new_token()
    with open_cli_store(ctx) as store:
        record = store.create_token(tenant or ADMIN_TENANT, hash_token(token), name, admin=admin, read_only=read_only)
    print(token)
    whose = (
        f"an operator (admin{', read-only' if read_only else ''}, the console at /ui)"
        if admin
        else f"tenant {tenant!r}"
    )
    print(
        f"token {record.id} for {whose}: keep it now, it is not shown again (revoke: jobq token revoke {record.id})",
        file=sys.stderr,
    )


@token_app.command("revoke")
def token_revoke(
    ctx: typer.Context,
    token_id: Annotated[str, typer.Argument(metavar="TOKEN_ID", help="The id `jobq token create` printed.")],
) -> None:
    """Revoke a token: from now on it gets 401, like any unknown token."""
    try:
        parsed = uuid.UUID(token_id)
    except ValueError:
        raise InvalidInput(f"not a token id (expected a UUID): {token_id!r}") from None
    with open_cli_store(ctx) as store:
        record = store.revoke_token(parsed)
    print(f"revoked token {record.id} of tenant {record.tenant!r}", file=sys.stderr)


@token_app.command("list")
def token_list(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(metavar="NAME", help="Only this tenant's tokens.")] = None,
) -> None:
    """List tokens (never the tokens themselves): id, tenant (``*`` for admin), name, created, revoked."""
    with open_cli_store(ctx) as store:
        records = store.list_tokens(tenant)
    for record in records:
        revoked = iso(record.revoked_at) or "-"
        tenant_or_admin = (
            f"{record.tenant} (admin{', read-only' if record.read_only else ''})" if record.admin else record.tenant
        )
        name = record.name or "-"
        print(f"{record.id}  {tenant_or_admin}  {name}  created {iso(record.created_at)}  revoked {revoked}")


# -- entry point ---------------------------------------------------------------------
