"""What the operator console reads: every tenant's jobs, a job's attempts, what each worker
runs, throughput per queue and time bucket, due versus waiting jobs, and admin tokens."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest

from service.errors import InvalidInput, Unauthorized
from service.jobs import ADMIN_TENANT, AttemptOutcome, JobQuery, JobState, StatusRead
from service.retry import GiveUp, Retry
from tests.conftest import FakeClock
from tests.store.builders import claim_one, new_job


def test_list_jobs_without_a_tenant_lists_every_tenants_jobs_newest_first_in_pages(store):
    ids = []
    for tenant in ("acme", "globex", "acme", "initech", "globex"):
        ids.append(store.enqueue(new_job(tenant=tenant)).id)
        time.sleep(0.002)  # ids carry milliseconds: keep them in creation order

    first = store.list_jobs(JobQuery(tenant=None, limit=3))
    second = store.list_jobs(JobQuery(tenant=None, limit=3, after_id=first.next_after_id))

    assert [s.id for s in first.items + second.items] == ids[::-1]
    assert second.next_after_id is None
    filtered = store.list_jobs(JobQuery(tenant=None, kind="resize", state=JobState.QUEUED))
    assert [s.id for s in filtered.items] == ids[::-1]
    assert store.list_jobs(JobQuery(tenant="acme")).items == [
        s for s in store.list_jobs(JobQuery(tenant=None)).items if s.tenant == "acme"
    ]


def test_job_attempts_are_the_timeline_of_a_job_oldest_first(store, clock: FakeClock):
    job = store.enqueue(new_job(max_attempts=3))
    other = store.enqueue(new_job(queue="elsewhere"))  # never claimed
    first = claim_one(store, "worker-a")
    assert first.id == job.id
    store.fail(first.lease, "RuntimeError: disk full", Retry(0))
    clock.advance(3600)  # past any backoff
    second = claim_one(store, "worker-b")
    assert second.id == job.id

    attempts = store.job_attempts(job.id)

    assert [(a.attempt, a.claim, a.worker, a.outcome) for a in attempts] == [
        (1, 1, "worker-a", AttemptOutcome.FAILED),
        (2, 2, "worker-b", None),  # running now: no end, no outcome yet
    ]
    assert attempts[0].error == "RuntimeError: disk full" and attempts[0].finished_at is not None
    assert attempts[1].finished_at is None and attempts[1].started_at == clock.now()
    assert store.job_attempts(other.id) == []
    assert store.job_attempts(uuid.uuid4()) == []


def test_running_jobs_are_every_tenants_running_jobs_by_worker(store):
    store.enqueue(new_job(tenant="acme"))
    store.enqueue(new_job(tenant="globex"))
    store.enqueue(new_job(tenant="initech"))  # stays queued
    a = claim_one(store, "worker-b")
    b = claim_one(store, "worker-a")

    running = store.running_jobs()

    assert [(s.lease_owner, s.id) for s in running] == [("worker-a", b.id), ("worker-b", a.id)]
    assert all(s.state is JobState.RUNNING for s in running)
    assert len(store.running_jobs(limit=1)) == 1


def test_throughput_counts_outcomes_per_queue_and_time_bucket(store, clock: FakeClock):
    def finish(queue: str, ok: bool) -> None:
        store.enqueue(new_job(queue=queue, max_attempts=1))
        job = claim_one(store, queues=(queue,))
        if ok:
            store.complete(job.lease, None)
        else:
            store.fail(job.lease, "ValueError: bad", GiveUp())

    finish("default", True)  # 70 minutes ago: outside the hour
    clock.advance(17 * 60)
    finish("default", True)  # 53 minutes ago: bucket 1 of 12 five-minute buckets
    finish("default", False)
    clock.advance(48 * 60)
    finish("gpu", True)  # 5 minutes ago: bucket 11
    clock.advance(5 * 60)
    finish("gpu", True)  # exactly now: the last bucket, not one past the window

    buckets = store.throughput(3600, 12)

    assert [(t.queue, t.bucket, t.succeeded, t.failed) for t in buckets] == [
        ("default", 1, 1, 1),
        ("gpu", 11, 2, 0),
    ]
    total = {(o.kind, o.succeeded, o.failed) for o in store.outcomes(3600)}
    assert total == {("resize", 3, 1)}  # the same jobs `jobq stats` counts


@pytest.mark.parametrize("window, buckets", [(0, 12), (-1, 12), (3600, 0), (3600, 1441), (3600, True)])
def test_throughput_refuses_a_window_that_is_not_one(store, window, buckets):
    with pytest.raises(InvalidInput):
        store.throughput(window, buckets)


def test_queue_stats_tell_due_jobs_from_delayed_ones(store, clock: FakeClock):
    store.enqueue(new_job())
    store.enqueue(new_job())
    store.enqueue(new_job(run_after=clock.now() + timedelta(hours=1)))

    [stats] = store.queue_stats()

    assert (stats.queued, stats.due, stats.running) == (3, 2, 0)


def test_an_admin_token_opens_the_console_and_nothing_of_a_tenants(store):
    job = store.enqueue(new_job(tenant=ADMIN_TENANT))  # even a job filed under the admin tenant's name
    admin = store.create_token("ignored", "hash-of-admin", "alice", admin=True)
    tenant = store.create_token("acme", "hash-of-acme")

    assert (admin.admin, admin.tenant, tenant.admin) == (True, ADMIN_TENANT, False)
    assert store.admin_token("hash-of-admin") == admin
    assert store.admin_token("hash-of-acme") is None  # a tenant's token is no operator's
    assert store.admin_token("hash-of-nothing") is None
    assert store.tenant_for_token("hash-of-admin") is None  # /v1 refuses an admin token
    assert store.read_statuses([StatusRead(job.id, token_hash="hash-of-admin")]) == [None]
    with pytest.raises(Unauthorized):
        store.get(job.id, token_hash="hash-of-admin")
    assert {t.id: t.admin for t in store.list_tokens()} == {admin.id: True, tenant.id: False}

    store.revoke_token(admin.id)
    assert store.admin_token("hash-of-admin") is None


def test_a_tenant_token_cannot_take_the_admin_tenants_name(store):
    with pytest.raises(InvalidInput):
        store.create_token(ADMIN_TENANT, "hash-x")
    with pytest.raises(InvalidInput):
        store.create_token("acme", "")


def test_job_ids_in_range_finds_the_jobs_whose_id_starts_with_a_prefix(store):
    from service.jobs import id_prefix_range

    first = store.enqueue(new_job()).id
    second = store.enqueue(new_job()).id
    common = len(_common_prefix(str(first), str(second)))
    both = str(first)[:common]
    assert store.job_ids_in_range(*id_prefix_range(both), limit=5) == sorted([first, second])
    assert store.job_ids_in_range(*id_prefix_range(str(first)), limit=5) == [first]
    assert store.job_ids_in_range(*id_prefix_range(str(second)[: common + 1]), limit=5) == [second]
    assert store.job_ids_in_range(*id_prefix_range(both.upper().replace("-", "")), limit=1) == [min(first, second)]
    with pytest.raises(InvalidInput):
        id_prefix_range("not-hex")


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def test_job_replays_are_who_replayed_a_job_and_when_oldest_first(store, clock: FakeClock):
    from service.jobs import ReplayFilter

    job = store.enqueue(new_job(max_attempts=1))
    claimed = claim_one(store)
    store.fail(claimed.lease, "RuntimeError: disk full", GiveUp())
    assert store.job_replays(job.id) == []
    store.replay(ReplayFilter(ids=(job.id,)), "console:alice")
    clock.advance(60)
    store.cancel(job.id)
    store.replay(ReplayFilter(ids=(job.id,)), "cli:bob")

    replays = store.job_replays(job.id)
    assert [(r.replayed_by, r.previous_state, r.previous_attempts) for r in replays] == [
        ("console:alice", "failed", 1),
        ("cli:bob", "cancelled", 0),
    ]
    assert replays[0].previous_error == "RuntimeError: disk full"
    assert replays[1].replayed_at - replays[0].replayed_at == timedelta(seconds=60)
    assert store.job_replays(uuid.uuid4()) == []


def test_a_console_session_lives_until_logout_revocation_idleness_or_its_end(store, clock: FakeClock, db):
    token = store.create_token("", "h" * 64, "alice", admin=True)
    store.start_console_session("s1", token.id, lifetime_seconds=3600, idle_seconds=600)
    assert store.console_session("s1", 600, 60).name == "alice"
    assert store.console_session("unknown", 600, 60) is None

    clock.advance(500)
    assert store.console_session("s1", 600, 60) is not None  # used: the idle time starts again
    clock.advance(500)
    assert store.console_session("s1", 600, 60) is not None
    clock.advance(601)
    assert store.console_session("s1", 600, 60) is None  # idle too long

    store.start_console_session("s2", token.id, lifetime_seconds=3600, idle_seconds=600)
    assert db.count("console_sessions") == 1  # the idle one was deleted at this login
    for _ in range(6):
        clock.advance(590)
        assert store.console_session("s2", 600, 60) is not None
    clock.advance(590)  # 3,540 + 590 s after the login: past its end, however busy
    assert store.console_session("s2", 600, 60) is None

    store.start_console_session("s3", token.id, lifetime_seconds=3600, idle_seconds=600)
    store.start_console_session("s4", token.id, lifetime_seconds=3600, idle_seconds=600)
    store.end_console_session("s3")
    assert store.console_session("s3", 600, 60) is None and store.console_session("s4", 600, 60) is not None
    store.revoke_token(token.id)
    assert store.console_session("s4", 600, 60) is None
