"""Fleet-wide limits and fair shares: set, list, delete (service.limits says what a scope is)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from service.cli.app import app, open_cli_store
from service.limits import Limit, ScopeUsage, format_rate, parse_rate

limits_app = typer.Typer(help="Fleet-wide limits: concurrency, rate and weight per scope.", no_args_is_help=True)
app.add_typer(limits_app, name="limits")

SCOPE_HELP = "tenant:NAME, tenant:* (every tenant, each on its own), kind:NAME, queue:NAME or key:NAME."


@limits_app.command("set")
def limits_set(
    ctx: typer.Context,
    scope: Annotated[str, typer.Argument(metavar="SCOPE", help=SCOPE_HELP)],
    concurrency: Annotated[
        int | None, typer.Option(metavar="N", help="At most N jobs of the scope run at once.")
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option(metavar="N/PERIOD", help="At most N starts per second, minute, hour or day: 5/s, 60/min."),
    ] = None,
    weight: Annotated[
        float | None, typer.Option(metavar="W", help="Tenants only: the share of free slots (default 1).")
    ] = None,
) -> None:
    """Set the scope's limit (replacing what was set on it); in force from the next claim."""
    count, per = parse_rate(rate) if rate is not None else (None, None)
    limit = Limit(scope, concurrency=concurrency, rate=count, per_seconds=per, weight=weight)
    with open_cli_store(ctx) as store:
        store.set_limit(limit)
    print(f"set {describe(limit)}", file=sys.stderr)


@limits_app.command("delete")
def limits_delete(
    ctx: typer.Context,
    scope: Annotated[str, typer.Argument(metavar="SCOPE", help=SCOPE_HELP)],
) -> None:
    """Remove the scope's limit: its jobs are no longer held back by it."""
    with open_cli_store(ctx) as store:
        store.delete_limit(scope)
    print(f"deleted the limit on {scope}", file=sys.stderr)


@limits_app.command("list")
def limits_list(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object: limits and counters.")] = False,
) -> None:
    """Every limit set, and each limited scope's running jobs (a tenant:* limit: one line per tenant)."""
    with open_cli_store(ctx) as store:
        limits = store.list_limits()
        usage = store.scope_usage()
    if as_json:
        print(
            json.dumps(
                {
                    "limits": [limit_fields(limit) for limit in limits],
                    "scopes": [usage_fields(u) for u in usage],
                }
            )
        )
        return
    for limit in limits:
        print(describe(limit))
    for u in usage:
        print(f"  {u.scope}: {u.running} running" + (f" of {u.concurrency}" if u.concurrency is not None else ""))


def describe(limit: Limit) -> str:
    parts = [limit.scope]
    if limit.concurrency is not None:
        parts.append(f"concurrency {limit.concurrency}")
    if limit.rate_text is not None:
        parts.append(f"rate {limit.rate_text}")
    if limit.weight is not None:
        parts.append(f"weight {limit.weight:g}")
    return "  ".join(parts)


def limit_fields(limit: Limit) -> dict[str, object]:
    return {"scope": limit.scope, "concurrency": limit.concurrency, "rate": limit.rate_text, "weight": limit.weight}


def usage_fields(usage: ScopeUsage) -> dict[str, object]:
    return {
        "scope": usage.scope,
        "running": usage.running,
        "concurrency": usage.concurrency,
        "rate": format_rate(usage.rate, usage.per_seconds),
    }
