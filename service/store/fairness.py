"""What both stores' claims share about walking the tenants: the cursor and how far to look.

A claim visits the tenants with due jobs in name order, starting just after the
last tenant this store's claims took from, and wraps around: round robin among
tenants, so a claim never reads every tenant (10,000 tenants cost what a few do)
and no tenant is left out for long. The cursor lives in the store object (one per
worker process); a fresh one starts at the beginning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


def tenants_to_visit(limit: int) -> int:
    """A claim of ``limit`` jobs looks at one tenant more than it could take from."""
    return limit + 1


def advance_cursor(cursor: str, claimed_tenants: Iterable[str]) -> str:
    """The last tenant taken from, in the order the claim visited them (after the cursor first)."""
    tenants = set(claimed_tenants)
    if not tenants:
        return cursor
    beyond = [tenant for tenant in tenants if tenant > cursor]
    return max(beyond) if beyond else max(tenants)


@dataclass(frozen=True)
class Candidate:
    """A due job a claim may take: its tenant's virtual time and the scopes it counts in."""

    id: str
    tenant: str
    scopes: tuple[str, ...]
    virtual_time: float  # (the tenant's running jobs + the job's place in its tenant's line) / weight
    visit: int  # the tenant's turn in this claim's round robin: breaks ties of virtual time
    place: int  # the job's place in its tenant's line (the tenant's priority order)


def choose(
    candidates: Sequence[Candidate], rooms: Mapping[str, int | None], *, every_tenant_limited: bool, limit: int
) -> list[Candidate]:
    """The SQLite claim's pick, from exact rooms read under the write lock: lowest virtual
    time first (equal ones in visiting order), each taken only while every scope of it
    has room; a tenant with no counter while tenant:* limits every tenant gets nothing."""
    left = dict(rooms)
    taken: list[Candidate] = []
    for job in sorted(candidates, key=lambda c: (c.virtual_time, c.visit, c.place)):
        if len(taken) == limit:
            break
        if any(_full(left, scope, every_tenant_limited) for scope in job.scopes):
            continue
        for scope in job.scopes:
            if left.get(scope) is not None:
                left[scope] -= 1  # type: ignore[operator]
        taken.append(job)
    return taken


def _full(left: Mapping[str, int | None], scope: str, every_tenant_limited: bool) -> bool:
    """No room in ``scope``: its counter is at 0, or a tenant has none while tenant:* limits every tenant."""
    if scope not in left:
        return every_tenant_limited and scope.startswith("tenant:")
    room = left[scope]
    return room is not None and room <= 0
