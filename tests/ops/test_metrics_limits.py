"""/metrics and limits: per-scope gauges (never a tenant's name) and kinds capped at the busiest 50."""

from __future__ import annotations

from service.jobs import NewJob
from service.limits import Limit
from service.metrics import KIND_SERIES, read_snapshot, render


def samples(store) -> list[str]:
    return [line for line in render(read_snapshot(store)).decode().splitlines() if not line.startswith("#")]


def test_kinds_beyond_the_busiest_50_are_summed_as_other(store):
    store.enqueue_many([NewJob(kind=f"made-up-{n:03}", payload={}) for n in range(200)])
    store.enqueue_many([NewJob(kind="busy", payload={}) for _ in range(5)])

    lines = samples(store)
    kinds = {line.split('kind="')[1].split('"')[0] for line in lines if line.startswith("jobq_jobs{")}
    assert len(kinds) == KIND_SERIES + 1 and "busy" in kinds and "other" in kinds
    other = next(line for line in lines if line.startswith('jobq_jobs{kind="other",queue="default",state="queued"}'))
    assert other.endswith(" 151.0"), other  # 200 made-up kinds, 49 of them shown by name


def test_limited_scopes_have_running_and_limit_gauges_and_tenants_only_counts(store):
    store.set_limit(Limit("key:gpu", concurrency=2))
    store.set_limit(Limit("kind:call_model", rate=20, per_seconds=1.0))
    store.set_limit(Limit("tenant:*", concurrency=1))
    store.enqueue_many([NewJob(kind="x", payload={}, concurrency_key="gpu", tenant="secret-tenant") for _ in range(3)])
    store.claim("w", ["default"], 5, 30)

    lines = samples(store)
    assert 'jobq_scope_running{scope="key:gpu"} 1.0' in lines
    assert 'jobq_scope_limit{scope="key:gpu"} 2.0' in lines
    assert 'jobq_scope_limit{scope="kind:call_model"} -1.0' in lines
    assert "jobq_tenant_scopes 1.0" in lines and "jobq_tenant_scopes_at_limit 1.0" in lines
    assert not [line for line in lines if "secret-tenant" in line]
