"""The status poll's fast path (service/api/fast_poll.py) answers exactly like the FastAPI route.

Two apps on one database and one pinned clock: the normal one, and one with the
fast path taken out. Every answer of a plain poll — every state, auth on and
off — must match byte for byte, and everything the fast path does not answer
itself (bad tokens, missing or foreign jobs, long polls) must still get the
route's answers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from service.api.fast_poll import StatusPollFastPath
from service.jobs import NewJob
from service.tokens import hash_token, new_token
from tests.api.asgi import asgi_client
from tests.conftest import FakeClock
from tests.store.builders import fail_job


@pytest.mark.parametrize("auth", [True, False], ids=["auth", "no-auth"])
def test_plain_polls_match_the_route_byte_for_byte(
    store_url: str, clock: FakeClock, auth: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    answered: list[str] = []
    original = StatusPollFastPath._answer

    async def counting(self: StatusPollFastPath, scope: dict[str, Any], job_id: str) -> Any:
        result = await original(self, scope, job_id)
        if result is not None:
            answered.append(job_id)
        return result

    monkeypatch.setattr(StatusPollFastPath, "_answer", counting)
    asyncio.run(_plain_polls(store_url, clock, auth, answered))


async def _plain_polls(store_url: str, clock: FakeClock, auth: bool, answered: list[str]) -> None:
    async with (
        asgi_client(store_url, clock, auth=auth) as (fast, app),
        asgi_client(store_url, clock, auth=auth, fast_poll=False) as (slow, _),
    ):
        store = app.state.store
        token = new_token()
        store.create_token("acme", hash_token(token))
        tenant = "acme" if auth else "default"
        headers = {"Authorization": f"Bearer {token}"} if auth else {}
        running, done, failed, queued = store.enqueue_many(  # the first three get claimed
            [
                NewJob(kind="k", tenant=tenant, total=10),
                NewJob(kind="k", tenant=tenant),
                NewJob(kind="k", tenant=tenant, max_attempts=1),
                NewJob(kind="k", tenant=tenant),
            ]
        )
        claimed = {c.id: c for c in store.claim("w", ["default"], 3, 30)}
        store.complete(claimed[done.id].lease, {"ok": True})
        fail_job(store, claimed[failed.id], "ValueError: boom", retryable=False)
        clock.advance(60)  # the running job's lease expired: stale, and the poll hint moved to 5 s
        ids = [queued.id, running.id, done.id, failed.id]
        assert claimed.keys() >= {running.id, done.id, failed.id}
        for job_id in ids:
            expected = await slow.get(f"/v1/jobs/{job_id}", headers=headers)
            assert expected.status == 200
            assert await fast.get(f"/v1/jobs/{job_id}", headers=headers) == expected
        assert answered == [str(i) for i in ids]  # all four came from the fast path


def test_everything_else_gets_the_routes_answers(pg_url: str, clock: FakeClock) -> None:
    asyncio.run(_everything_else(pg_url, clock))


async def _everything_else(pg_url: str, clock: FakeClock) -> None:
    async with asgi_client(pg_url, clock) as (fast, app), asgi_client(pg_url, clock, fast_poll=False) as (slow, _):
        store = app.state.store
        mine, theirs = new_token(), new_token()
        store.create_token("acme", hash_token(mine))
        store.create_token("other", hash_token(theirs))
        job = store.enqueue(NewJob(kind="k", tenant="acme"))
        requests: list[tuple[str, dict[str, str]]] = [
            (f"/v1/jobs/{job.id}", {}),  # no token
            (f"/v1/jobs/{job.id}", {"Authorization": f"Bearer {new_token()}"}),  # unknown token
            (f"/v1/jobs/{job.id}", {"Authorization": f"Basic {mine}"}),
            (f"/v1/jobs/{job.id}", {"Authorization": f"Bearer {theirs}"}),  # another tenant's job: 404
            (f"/v1/jobs/{new_token()[:8]}", {"Authorization": f"Bearer {mine}"}),  # not an id: 422
            ("/v1/jobs/00000000-0000-0000-0000-000000000000", {"Authorization": f"Bearer {mine}"}),
            (f"/v1/jobs/{job.id}?wait=0", {"Authorization": f"Bearer {mine}"}),
            (f"/v1/jobs/{job.id}?stat=1", {"Authorization": f"Bearer {mine}"}),
            (f"/v1/jobs/{str(job.id).upper()}", {"Authorization": f"Bearer {mine}"}),
            (f"/v1/jobs/{job.id}", {"Authorization": f"Bearer {mine}", "If-None-Match": "x" * 300}),
        ]
        for path, headers in requests:
            assert await fast.get(path, headers=headers) == await slow.get(path, headers=headers), path
