"""Results with bounds (issue 26): JOBQ_MAX_RESULT_BYTES where a result is written, and a
result read back a chunk at a time, on both stores."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from service.errors import InvalidInput, InvalidTransition, JobNotFound, ResultTooLarge
from service.jobs import Completion, ItemOutcome, ItemState
from service.store import Store
from tests.conftest import Database, FakeClock
from tests.store.builders import claim_one, new_job

LIMIT = 4_096


@pytest.fixture
def bounded(make_store: Callable[..., Store], store_url: str, clock: FakeClock) -> Store:
    return make_store(store_url, clock=clock, max_result_bytes=LIMIT)


def test_a_result_over_max_result_bytes_is_refused_naming_its_size_and_the_setting(bounded: Store, db: Database):
    bounded.enqueue(new_job())
    job = claim_one(bounded)
    too_big = {"text": "x" * LIMIT}

    with pytest.raises(ResultTooLarge) as refused:
        bounded.complete(job.lease, too_big)

    message = str(refused.value)
    assert f"is {len(json.dumps(too_big, separators=(',', ':')))} bytes" in message
    assert f"limit of {LIMIT}" in message and "JOBQ_MAX_RESULT_BYTES" in message
    assert isinstance(refused.value, InvalidInput)  # the finisher fails such an attempt for good
    assert db.job(job.id)["state"] == "running" and db.count("job_results") == 0  # nothing written


def test_a_result_at_max_result_bytes_is_stored(bounded: Store):
    bounded.enqueue(new_job())
    job = claim_one(bounded)
    exact = "x" * (LIMIT - 2)  # a JSON string: two quotes and the text

    bounded.complete(job.lease, exact)

    assert bounded.get_result(job.id) == exact


def test_an_item_result_over_the_bound_is_refused_by_the_heartbeat_and_the_completion(bounded: Store, db: Database):
    bounded.enqueue(new_job())
    job = claim_one(bounded)
    big = ItemOutcome(3, ItemState.OK, result="y" * LIMIT)

    with pytest.raises(ResultTooLarge, match=r"the result of item 3 is .*\(JOBQ_MAX_RESULT_BYTES\)"):
        bounded.heartbeat(job.lease, 30, items=[big])
    with pytest.raises(ResultTooLarge, match="item 3"):
        bounded.complete_many([Completion(job.lease, "ok", items=(big,))])
    assert db.count("job_items") == 0 and db.job(job.id)["state"] == "running"


def test_a_result_reads_back_in_chunks_that_add_up_to_its_size(store: Store):
    store.enqueue(new_job())
    job = claim_one(store)
    result = {"text": "caf\u00e9 \u2603 " * 700, "n": [1, 2.5, None, True]}  # multi-byte text across chunk edges
    store.complete(job.lease, result)

    stored = store.result_size(job.id)
    chunks = []
    offset = 0
    while offset < stored.size:
        chunk = store.read_result_chunk(stored.result_id, offset, 1_000)
        assert 0 < len(chunk) <= 1_000
        chunks.append(chunk)
        offset += len(chunk)

    body = b"".join(chunks)
    assert len(body) == stored.size
    assert json.loads(body.decode("utf-8")) == result
    assert store.read_result_chunk(stored.result_id, stored.size, 1_000) == b""


def test_result_size_is_scoped_and_refused_before_success(store: Store):
    queued = store.enqueue(new_job(tenant="acme"))
    with pytest.raises(InvalidTransition, match="queued"):
        store.result_size(queued.id, "acme")
    job = claim_one(store)
    store.complete(job.lease, [1, 2, 3])
    stored = store.result_size(job.id, "acme")
    assert stored.size == len(store.read_result_chunk(stored.result_id, 0, 100))  # PostgreSQL spaces its JSON
    with pytest.raises(JobNotFound):
        store.result_size(job.id, "other-tenant")
