"""Bad input: a named exception with a clear message, and nothing written."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from service.errors import InvalidInput, JobNotFound, LeaseLost, PayloadTooLarge
from service.jobs import MAX_PAGE_SIZE, ItemQuery, JobQuery, Lease, ReplayFilter
from service.payloads import MAX_DELAY_SECONDS, MAX_JSON_DEPTH, MAX_TOTAL
from service.retry import GiveUp, Retry
from service.schedules import ScheduleSpec
from service.store.postgres.submit import COPY_FROM_JOBS
from tests.conftest import Database
from tests.store.builders import claim_one, fail_job, new_job
from tests.test_payloads import nested

TABLES = ("jobs", "job_attempts", "job_results", "job_replays")


def _counts(db: Database) -> dict[str, int]:
    return {table: db.count(table) for table in TABLES}


BAD_JOBS = [
    ({"payload": ["not", "an", "object"]}, "payload must be a JSON object"),
    ({"payload": "a string"}, "payload must be a JSON object"),
    ({"payload": {"when": datetime(2030, 1, 1)}}, "payload is not JSON-serialisable"),
    ({"payload": {"x": float("nan")}}, "payload is not JSON-serialisable"),
    ({"payload": {"x": [float("-inf")]}}, "payload is not JSON-serialisable"),
    ({"payload": {"text": ["a\u0000b"]}}, "payload must not contain the NUL character"),
    ({"payload": {"key \ud800": 1}}, "payload must be valid Unicode"),
    ({"payload": nested(MAX_JSON_DEPTH + 1)}, f"payload is nested more than {MAX_JSON_DEPTH} objects and arrays"),
    ({"payload": nested(5_000)}, f"payload is nested more than {MAX_JSON_DEPTH}"),  # past the JSON encoder's recursion
    ({"kind": ""}, "kind must be a non-empty string"),
    ({"kind": "   "}, "kind must be a non-empty string"),
    ({"kind": "k" * 201}, "kind must be at most 200 characters"),
    ({"priority": -1}, "priority must be an integer"),
    ({"max_attempts": 0}, "max_attempts must be an integer"),
    ({"max_attempts": -3}, "max_attempts must be an integer"),
    ({"queue": ""}, "queue must be a non-empty string"),
    ({"tenant": ""}, "tenant must be a non-empty string"),
    ({"total": -1}, "total must be a non-negative integer"),
    ({"total": MAX_TOTAL + 1}, "total must be a non-negative integer"),  # the API's bound, the store's too
    ({"delay_seconds": MAX_DELAY_SECONDS + 1}, "delay_seconds must be a non-negative number"),
    ({"delay_seconds": -5}, "delay_seconds must be a non-negative number"),
    ({"delay_seconds": float("inf")}, "delay_seconds must be a non-negative number"),
    ({"delay_seconds": float("nan")}, "delay_seconds must be a non-negative number"),
    ({"delay_seconds": True}, "delay_seconds must be a non-negative number"),
    ({"run_after": datetime(2030, 1, 1)}, "run_after must carry a time zone"),
    ({"idempotency_key": ""}, "idempotency_key must be a non-empty string"),
]


def test_a_bad_job_is_rejected_by_name_and_nothing_is_written(store, db: Database):
    """Each bad job alone, in the middle of a batch of good ones, and in the middle of a batch
    large enough for COPY (PostgreSQL): InvalidInput naming the field, in the same words."""
    good = [new_job() for _ in range(COPY_FROM_JOBS // 2)]
    problems = []
    for fields, message in BAD_JOBS:
        said = set()
        for submit in (
            lambda job: store.enqueue(job),
            lambda job: store.enqueue_many([new_job(), job, new_job()]),
            lambda job: store.enqueue_many([*good, job, *good]),
        ):
            try:
                submit(new_job(**fields))
            except InvalidInput as exc:
                said.add(str(exc))
                if not re.search(message, str(exc)):
                    problems.append(f"{fields}: {exc!r} does not say {message!r}")
            else:
                problems.append(f"{fields}: accepted")
        if len(said) > 1:
            problems.append(f"{fields}: refused in different words: {said}")
    assert problems == []
    assert db.count("jobs") == 0


def test_a_payload_over_the_stores_bound_is_refused_on_every_way_in_and_nothing_is_written(
    make_store, store_url: str, db: Database
) -> None:
    """The size rule lives in the store (JOBQ_MAX_BODY_BYTES, as open_store hands it on): one job,
    a batch, a batch large enough for COPY, a workflow's batch, a schedule. A payload at the
    bound is taken by each."""
    limit = 2_048
    store = make_store(store_url, max_body_bytes=limit)
    at = {"s": "x" * (limit - len('{"s":""}'))}
    over = {"s": "x" * (limit + 1 - len('{"s":""}'))}
    many = [new_job() for _ in range(COPY_FROM_JOBS)]
    ways: dict[str, Callable[[dict[str, Any]], object]] = {
        "enqueue": lambda payload: store.enqueue(new_job(payload=payload)),
        "batch": lambda payload: store.enqueue_many([new_job(), new_job(payload=payload)]),
        "copy": lambda payload: store.enqueue_many([*many, new_job(payload=payload)]),
        "workflow": lambda payload: store.enqueue_many([new_job(), new_job(payload=payload, depends_on=(0,))]),
        "schedule": lambda payload: store.save_schedule(
            ScheduleSpec(name="nightly", cron="0 3 * * *", kind="resize", payload=payload), datetime.now(UTC)
        ),
    }
    for way, submit in ways.items():
        with pytest.raises(PayloadTooLarge, match=rf"payload is {limit + 1} bytes of JSON, over the limit of {limit}"):
            submit(over)
        assert db.count("jobs") == 0 and db.count("schedules") == 0, way
    for submit in ways.values():
        submit(at)
    assert db.count("jobs") == 1 + 2 + (len(many) + 1) + 2
    assert [schedule.spec.payload for schedule in store.list_schedules()] == [at]


def test_progress_beyond_the_total_is_rejected_and_nothing_is_written(store, db: Database):
    store.enqueue(new_job(total=10))
    job = claim_one(store)
    store.heartbeat(job.lease, 30, done=2)
    before = db.job(job.id)

    with pytest.raises(InvalidInput, match=r"done \(11\) cannot exceed total \(10\)"):
        store.heartbeat(job.lease, 30, done=11, total=10)
    with pytest.raises(InvalidInput):
        store.heartbeat(job.lease, 30, done=11)  # beyond the total already stored
    with pytest.raises(InvalidInput, match="done must be a non-negative integer"):
        store.heartbeat(job.lease, 30, done=-1)
    with pytest.raises(InvalidInput, match="total must be a non-negative integer"):
        store.heartbeat(job.lease, 30, total=MAX_TOTAL + 1)  # more than the column holds

    assert db.job(job.id) == before


def test_a_checkpoint_that_is_not_json_is_rejected_and_nothing_is_written(store, db: Database):
    store.enqueue(new_job())
    job = claim_one(store)
    before = db.job(job.id)

    with pytest.raises(InvalidInput, match="checkpoint is not JSON-serialisable"):
        store.heartbeat(job.lease, 30, done=1, checkpoint={"obj": object()})

    assert db.job(job.id) == before


def test_a_result_that_is_not_json_is_rejected_and_the_job_keeps_running(store, db: Database):
    store.enqueue(new_job())
    job = claim_one(store)
    before = _counts(db), db.job(job.id)

    with pytest.raises(InvalidInput, match="result is not JSON-serialisable"):
        store.complete(job.lease, {"set": {1, 2}})

    assert (_counts(db), db.job(job.id)) == before


def test_a_failure_without_an_error_is_rejected(store, db: Database):
    store.enqueue(new_job())
    job = claim_one(store)
    before = _counts(db), db.job(job.id)

    for error in ("", "   "):
        with pytest.raises(InvalidInput, match="error must be a non-empty string"):
            fail_job(store, job, error, retryable=False)

    assert (_counts(db), db.job(job.id)) == before


BAD_CLAIMS = [
    ({"limit": 0}, "claim limit must be at least 1"),
    ({"worker": ""}, "worker must be a non-empty string"),
    ({"lease_seconds": 0}, "lease_seconds must be a number"),
    ({"lease_seconds": -1}, "lease_seconds must be a number"),
]


def test_a_bad_claim_is_rejected_and_claims_nothing(store, db: Database):
    store.enqueue(new_job())

    for args, message in BAD_CLAIMS:
        call = {"worker": "worker-a", "queues": ["default"], "limit": 1, "lease_seconds": 30, **args}
        with pytest.raises(InvalidInput, match=message):
            store.claim(**call)

    assert db.count("jobs", "state = 'queued'") == 1
    assert db.count("job_attempts") == 0


def test_an_unknown_job_is_not_found(store, db: Database):
    unknown = uuid.uuid4()

    with pytest.raises(JobNotFound, match=str(unknown)):
        store.get(unknown)
    with pytest.raises(JobNotFound):
        store.get_result(unknown)
    with pytest.raises(JobNotFound):
        store.cancel(unknown)
    assert store.replay(ReplayFilter(ids=(unknown,)), by="bob") == []
    assert _counts(db) == dict.fromkeys(TABLES, 0)


def test_a_lease_on_an_unknown_job_holds_nothing(store, db: Database):
    lease = Lease(job_id=uuid.uuid4(), owner="worker-a", attempt=1)

    assert store.heartbeat(lease, 30).held is False
    with pytest.raises(LeaseLost):
        store.complete(lease, {})
    with pytest.raises(LeaseLost):
        store.fail(lease, "boom", GiveUp())
    with pytest.raises(LeaseLost):
        store.release(lease)
    assert _counts(db) == dict.fromkeys(TABLES, 0)


@pytest.mark.parametrize("limit", [0, -1, MAX_PAGE_SIZE + 1])
def test_a_page_size_outside_one_to_the_api_limit_is_rejected(store, limit):
    store.enqueue_many([new_job(), new_job()])

    with pytest.raises(InvalidInput, match=f"a page holds 1 to {MAX_PAGE_SIZE} jobs"):
        store.list_jobs(JobQuery(limit=limit))
    assert len(store.list_jobs(JobQuery(limit=MAX_PAGE_SIZE)).items) == 2


def test_a_cursor_past_any_row_is_refused_by_name_not_an_integer_overflow(store) -> None:
    """Found by the console's fuzz: SQLite raised OverflowError for integers past 64 bits (a 500)."""
    job = store.enqueue(new_job(total=2))
    for after in (-2, MAX_TOTAL + 1, 2**70):
        with pytest.raises(InvalidInput, match="a page of items starts after an item's index"):
            store.list_items(ItemQuery(job_id=job.id, after_index=after))
    assert store.list_items(ItemQuery(job_id=job.id, after_index=MAX_TOTAL)).items == []
    for before in (-1, 2**63, 2**70):
        with pytest.raises(InvalidInput, match="a page of the audit trail ends before an entry's number"):
            store.list_actions(10, before)
    assert store.list_actions(10, 2**63 - 1) == []


def test_json_with_a_nul_character_is_rejected_alike_by_both_stores(store, db: Database):
    """PostgreSQL's jsonb cannot hold U+0000; a job one store accepts the other must not refuse."""
    with pytest.raises(InvalidInput):
        store.enqueue(new_job(payload={"text": "a\u0000b"}))
    assert db.count("jobs") == 0

    store.enqueue(new_job())
    job = claim_one(store)
    before = _counts(db), db.job(job.id)
    with pytest.raises(InvalidInput):
        store.heartbeat(job.lease, 30, checkpoint={"text": "a\u0000b"})
    with pytest.raises(InvalidInput):
        store.complete(job.lease, {"text": "a\u0000b"})
    assert (_counts(db), db.job(job.id)) == before


def test_json_round_trips_exactly(store):
    payload = {"big": 2**70, "float": 0.1, "text": 'żółw ✓ "quoted" \\', "": None, "list": [1, [2, {}]]}
    store.enqueue(new_job(payload=payload))
    job = claim_one(store)

    assert job.payload == payload
    store.heartbeat(job.lease, 30, checkpoint=payload)
    store.complete(job.lease, payload)
    assert store.get_result(job.id) == payload


@pytest.mark.parametrize("decision", [True, "retry", Retry(-1.0), Retry(float("nan")), Retry(float("inf"))])
def test_a_failure_without_a_sound_retry_decision_is_refused_and_changes_nothing(store, db: Database, decision):
    store.enqueue(new_job())
    job = claim_one(store)
    before = db.job(job.id)
    with pytest.raises(InvalidInput):
        store.fail(job.lease, "boom", decision)
    assert db.job(job.id) == before


@pytest.mark.parametrize("delays", [[], [1.0] * 3, [-1.0] * 100, [float("nan")] * 100])
def test_reap_refuses_delays_that_are_not_one_sound_delay_per_attempt(store, delays):
    with pytest.raises(InvalidInput):
        store.reap(delays)
