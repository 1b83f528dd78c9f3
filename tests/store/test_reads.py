"""Reading jobs: get, list (newest first, keyset pages, tenant-scoped), stale."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest

from service.errors import InvalidInput, JobNotFound
from service.jobs import JobQuery, JobState, StatusRead
from tests.conftest import FakeClock
from tests.store.builders import claim_one, new_job


def _enqueue_in_order(store, count: int, **fields):
    """Jobs whose ids are in creation order (ids carry milliseconds: keep them apart)."""
    statuses = []
    for i in range(count):
        statuses.append(store.enqueue(new_job(payload={"i": i}, **fields)))
        time.sleep(0.002)
    return statuses


def test_get_answers_another_tenants_job_as_not_found(store):
    job = store.enqueue(new_job(tenant="acme"))

    with pytest.raises(JobNotFound) as raised:
        store.get(job.id, "globex")
    assert raised.value.job_id == job.id
    assert store.get(job.id, "acme").id == job.id
    assert store.get(job.id).id == job.id  # no tenant: an operator's read


def test_get_of_an_unknown_job_is_not_found(store):
    with pytest.raises(JobNotFound):
        store.get(uuid.uuid4())


def test_list_jobs_is_newest_first_in_keyset_pages(store):
    jobs = _enqueue_in_order(store, 7)
    newest_first = [j.id for j in reversed(jobs)]

    seen, after = [], None
    for expected_size in (3, 3, 1):
        page = store.list_jobs(JobQuery(limit=3, after_id=after))
        assert len(page.items) == expected_size
        seen += [s.id for s in page.items]
        after = page.next_after_id
    assert after is None
    assert seen == newest_first


def test_a_page_that_ends_exactly_at_the_last_job_has_no_next_page(store):
    store.enqueue_many([new_job(payload={"i": i}) for i in range(4)])

    page = store.list_jobs(JobQuery(limit=4))

    assert len(page.items) == 4 and page.next_after_id is None


def test_list_jobs_shows_only_the_tenants_own_jobs(store):
    acme = _enqueue_in_order(store, 3, tenant="acme")
    store.enqueue_many([new_job(tenant="globex") for _ in range(2)])

    page = store.list_jobs(JobQuery(tenant="acme"))

    assert [s.id for s in page.items] == [j.id for j in reversed(acme)]
    assert {s.tenant for s in page.items} == {"acme"}
    assert store.list_jobs(JobQuery(tenant="initech")).items == []


def test_list_jobs_filters_by_state_kind_queue_and_creation_time(store, clock: FakeClock):
    store.enqueue(new_job("resize", queue="images"))
    store.enqueue(new_job("transcribe", queue="audio"))
    clock.advance(60)
    late = store.enqueue(new_job("resize", queue="audio"))
    running = claim_one(store, queues=("images",))

    def ids(**filters):
        return {s.id for s in store.list_jobs(JobQuery(**filters)).items}

    assert ids(state=JobState.RUNNING) == {running.id}
    assert len(ids(state=JobState.QUEUED)) == 2
    assert ids(kind="resize") == {running.id, late.id}
    assert len(ids(queue="audio")) == 2
    assert ids(created_after=clock.now() - timedelta(seconds=30)) == {late.id}
    assert ids(kind="resize", queue="audio", state=JobState.QUEUED) == {late.id}


def test_a_running_job_past_its_lease_reads_stale(store, clock: FakeClock):
    store.enqueue(new_job(total=10))
    job = claim_one(store, lease_seconds=30)
    store.heartbeat(job.lease, 30, done=9)
    assert store.get(job.id).stale is False

    clock.advance(31)  # the worker died at 90 %: nobody renewed the lease

    status = store.get(job.id)
    assert (status.state, status.done, status.stale) == (JobState.RUNNING, 9, True)
    assert store.list_jobs(JobQuery()).items[0].stale is True


def test_queued_and_finished_jobs_are_never_stale(store, clock: FakeClock):
    queued = store.enqueue(new_job("queued", run_after=clock.now() + timedelta(days=1)))
    store.enqueue(new_job("done"))
    done = claim_one(store, lease_seconds=5)
    store.complete(done.lease, None)
    clock.advance(7200)

    assert store.get(queued.id).stale is False
    assert store.get(done.id).stale is False


def test_read_statuses_answers_many_polls_in_order_each_within_its_own_tenant(store):
    acme = store.enqueue(new_job(tenant="acme"))
    globex = store.enqueue(new_job(tenant="globex"))
    store.create_token("acme", "hash-of-acme-token")
    revoked = store.create_token("acme", "hash-of-revoked-token")
    store.revoke_token(revoked.id)
    missing = uuid.uuid4()

    found = store.read_statuses(
        [
            StatusRead(acme.id, token_hash="hash-of-acme-token"),
            StatusRead(globex.id, token_hash="hash-of-acme-token"),  # another tenant's job
            StatusRead(acme.id, token_hash="hash-of-revoked-token"),
            StatusRead(acme.id, token_hash="hash-of-no-token"),
            StatusRead(missing, tenant="acme"),
            StatusRead(globex.id, tenant="globex"),
            StatusRead(globex.id, tenant="acme"),
            StatusRead(acme.id, tenant="acme"),  # the same job twice in one batch
        ]
    )

    assert [status.id if status else None for status in found] == [
        acme.id,
        None,
        None,
        None,
        None,
        globex.id,
        None,
        acme.id,
    ]
    assert found[0] == store.get(acme.id, "acme")  # the same status a single read gives


def test_read_statuses_of_nothing_reads_nothing(store):
    assert store.read_statuses([]) == []


def test_a_status_read_must_name_a_tenant_or_a_token():
    with pytest.raises(InvalidInput):
        StatusRead(uuid.uuid4())
    with pytest.raises(InvalidInput):
        StatusRead(uuid.uuid4(), tenant="acme", token_hash="h")
