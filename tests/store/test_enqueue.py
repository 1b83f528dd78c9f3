"""Submitting jobs: defaults, every field, batches, idempotency keys."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from service.errors import IdempotencyConflict, Unauthorized
from service.jobs import JobState
from service.store.postgres import submit
from service.store.postgres.submit import COPY_FROM_JOBS
from tests.conftest import Database, FakeClock
from tests.store.builders import new_job

DAY = 86_400.0


def test_enqueued_job_has_the_documented_defaults(store, db: Database, clock: FakeClock):
    status = store.enqueue(new_job(payload={"image": "cat.png", "sizes": [64, 128]}))

    assert status.state is JobState.QUEUED
    assert (status.queue, status.tenant, status.kind) == ("default", "default", "resize")
    assert (status.priority, status.attempts, status.max_attempts) == (0, 0, 3)
    assert (status.done, status.total, status.error) == (0, None, None)
    assert status.cancel_requested is False and status.stale is False
    assert status.concurrency_key is None and status.idempotency_key is None
    assert status.lease_owner is None and status.lease_expires_at is None
    assert status.run_after == clock.now() == status.created_at == status.updated_at
    assert status.started_at is None and status.finished_at is None and status.result_id is None

    row = db.job(status.id)
    assert row["payload"] == {"image": "cat.png", "sizes": [64, 128]}
    assert row["checkpoint"] is None
    assert row["state"] == "queued"
    assert db.count("job_attempts") == 0


def test_enqueue_stores_every_field_it_is_given(store, db: Database, clock: FakeClock):
    status = store.enqueue(
        new_job(
            "transcribe",
            payload={"url": "s3://b/k"},
            queue="audio",
            priority=7,
            max_attempts=5,
            delay_seconds=90,
            total=40,
            tenant="acme",
            concurrency_key="acme:transcribe",
            idempotency_key="upload-17",
        )
    )

    assert (status.kind, status.queue, status.tenant) == ("transcribe", "audio", "acme")
    assert (status.priority, status.max_attempts, status.total, status.done) == (7, 5, 40, 0)
    assert status.concurrency_key == "acme:transcribe"
    assert status.idempotency_key == "upload-17"
    assert status.run_after == clock.now() + timedelta(seconds=90)
    assert store.get(status.id, "acme") == status
    assert db.job(status.id)["payload"] == {"url": "s3://b/k"}


def test_an_explicit_run_after_wins_over_the_delay(store, clock: FakeClock):
    at = clock.now() + timedelta(hours=2)
    status = store.enqueue(new_job(run_after=at, delay_seconds=5))
    assert status.run_after == at


def test_enqueue_many_answers_in_the_order_given(store, db: Database):
    jobs = [new_job(f"kind-{i}", payload={"i": i}, priority=(i * 7) % 5) for i in range(25)]

    statuses = store.enqueue_many(jobs)

    assert [s.kind for s in statuses] == [f"kind-{i}" for i in range(25)]
    assert [s.priority for s in statuses] == [(i * 7) % 5 for i in range(25)]
    assert len({s.id for s in statuses}) == 25
    assert db.count("jobs") == 25
    for i, status in enumerate(statuses):
        assert db.job(status.id)["payload"] == {"i": i}


def test_a_batch_answers_each_job_as_stored_delays_and_keys_mixed(store, clock: FakeClock):
    """The statuses are built from one summary row (PostgreSQL): each must still equal the stored job."""
    at = clock.now() + timedelta(hours=2)
    store.enqueue(new_job(idempotency_key="taken"))
    jobs = [
        new_job(delay_seconds=0),
        new_job(delay_seconds=1.5),
        new_job(run_after=at),
        new_job(idempotency_key="taken"),
        new_job(idempotency_key="fresh", delay_seconds=30),
        new_job(),
    ]

    statuses = store.enqueue_many(jobs)

    for status in statuses:
        assert status == store.get(status.id)
    assert statuses[1].run_after - statuses[1].created_at == timedelta(seconds=1.5)
    assert statuses[2].run_after == at
    assert statuses[4].run_after == statuses[4].created_at + timedelta(seconds=30)
    new = [s.id for i, s in enumerate(statuses) if i != 3]
    assert new == sorted(new), "ids are time-ordered in the order given"


def test_a_batch_as_large_as_copy_takes_answers_each_job_as_stored(store, db: Database, clock: FakeClock):
    """A batch of COPY_FROM_JOBS jobs without keys goes by COPY on PostgreSQL, which takes no
    expressions: its statuses, run_after included, must still be what was stored."""
    at = clock.now() + timedelta(hours=2)
    delays = [0, 1.5, 0.0000005, 0.0000015, 2.0000004999, 90, 366 * 86_400]
    jobs = [
        new_job(
            f"kind-{i % 3}",
            payload={"i": i, "text": "żółw ✓ \\u0000 \U0001f600" if i % 2 else "plain", "nested": [{"n": i}]},
            queue=f"queue-{i % 2}",
            tenant=f"tenant-{i % 4}",
            priority=i % 5,
            max_attempts=None if i % 3 else 1 + i % 7,
            total=None if i % 2 else i,
            concurrency_key=None if i % 5 else f"key-{i}",
            delay_seconds=delays[i % len(delays)],
            run_after=at if i % 11 == 0 else None,
        )
        for i in range(COPY_FROM_JOBS)
    ]

    statuses = store.enqueue_many(jobs)

    assert [status == store.get(status.id, status.tenant) for status in statuses] == [True] * len(jobs)
    assert [s.id for s in statuses] == sorted(s.id for s in statuses), "ids are time-ordered in the order given"
    assert [db.job(s.id)["payload"] for s in statuses] == [job.payload for job in jobs]
    assert [bool(db.job(s.id)["max_attempts_default"]) for s in statuses] == [job.max_attempts is None for job in jobs]
    assert statuses[1].run_after - statuses[1].created_at == timedelta(seconds=1.5)
    assert statuses[0].run_after == at and statuses[11].run_after == at
    assert {s.created_at for s in statuses} == {clock.now()}


def test_enqueue_many_of_nothing_writes_nothing(store, db: Database):
    assert store.enqueue_many([]) == []
    assert db.count("jobs") == 0


def test_enqueue_many_returns_the_existing_job_in_place_of_a_used_key(store, db: Database):
    existing = store.enqueue(new_job(idempotency_key="k-1", payload={"v": "first"}))

    statuses = store.enqueue_many([new_job("a"), new_job(idempotency_key="k-1", payload={"v": "first"}), new_job("c")])

    assert [s.kind for s in statuses] == ["a", "resize", "c"]
    assert statuses[1] == existing
    assert db.count("jobs") == 3


def test_a_key_used_for_another_job_refuses_the_whole_batch(store, db: Database):
    existing = store.enqueue(new_job(idempotency_key="k-1", payload={"v": "first"}))

    with pytest.raises(IdempotencyConflict, match=f"already used for job {existing.id} with a different payload"):
        store.enqueue_many([new_job("a"), new_job(idempotency_key="k-1", payload={"v": "second"}), new_job("c")])

    assert db.count("jobs") == 1  # all or none: neither "a" nor "c"
    assert db.job(existing.id)["payload"] == {"v": "first"}


def test_a_key_used_twice_in_one_batch_for_two_jobs_refuses_the_batch(store, db: Database):
    with pytest.raises(IdempotencyConflict, match="different kind"):
        store.enqueue_many([new_job("a", idempotency_key="dup"), new_job("b", idempotency_key="dup")])

    assert db.count("jobs") == 0


def test_a_key_whose_job_was_pruned_makes_a_new_job(store, db: Database, clock: FakeClock):
    first = store.enqueue(new_job(idempotency_key="order-42", payload={"v": 1}))
    store.cancel(first.id)
    clock.advance(2 * DAY)
    assert store.prune(DAY) == 1

    again = store.enqueue(new_job(idempotency_key="order-42", payload={"v": 2}))  # the key is free again

    assert again.id != first.id
    assert again.state is JobState.QUEUED
    assert db.count("jobs") == 1
    assert db.job(again.id)["payload"] == {"v": 2}


@pytest.mark.postgres_only(reason="SQLite's enqueue is one write transaction: no prune comes between its statements")
def test_a_key_whose_job_is_pruned_between_the_insert_and_the_read_back_makes_a_new_job(
    store, make_store, store_url: str, db: Database, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
):
    first = store.enqueue(new_job(idempotency_key="order-42", payload={"v": 1}))
    store.cancel(first.id)
    clock.advance(2 * DAY)
    pruner = make_store(store_url, clock=clock)
    pruned: list[int] = []
    read_insert = submit._queued  # runs between ENQUEUE_JOBS (which found the key taken) and the read-back

    def prune_meanwhile(*args: Any) -> Any:
        if not pruned:  # the first insert only: the pruner's delete commits in between
            pruned.append(pruner.prune(DAY))
        return read_insert(*args)

    monkeypatch.setattr(submit, "_queued", prune_meanwhile)
    again = store.enqueue(new_job(idempotency_key="order-42", payload={"v": 2}))

    assert pruned == [1]
    assert again.id != first.id
    assert db.count("jobs") == 1
    assert db.job(again.id)["payload"] == {"v": 2}


def test_idempotency_key_returns_the_existing_job_of_the_same_tenant(store, db: Database):
    first = store.enqueue(new_job(tenant="acme", idempotency_key="order-42", payload={"n": 1}))
    again = store.enqueue(new_job(tenant="acme", idempotency_key="order-42", payload={"n": 1}))

    assert again.id == first.id
    assert again == first
    assert db.count("jobs") == 1


def test_idempotency_key_answers_with_the_stored_job_even_if_it_moved_on(store, db: Database):
    first = store.enqueue(new_job(idempotency_key="order-42"))
    store.cancel(first.id)

    again = store.enqueue(new_job(idempotency_key="order-42"))

    assert again.id == first.id
    assert again.state is JobState.CANCELLED
    assert db.count("jobs") == 1


def test_the_same_idempotency_key_in_two_tenants_makes_two_jobs(store, db: Database):
    acme = store.enqueue(new_job(tenant="acme", idempotency_key="order-42"))
    globex = store.enqueue(new_job(tenant="globex", idempotency_key="order-42"))

    assert acme.id != globex.id
    assert (acme.tenant, globex.tenant) == ("acme", "globex")
    assert db.count("jobs") == 2


def test_the_same_idempotency_key_twice_in_one_batch_makes_one_job(store, db: Database):
    statuses = store.enqueue_many([new_job(idempotency_key="dup"), new_job("other"), new_job(idempotency_key="dup")])

    assert statuses[0].id == statuses[2].id
    assert statuses[1].id != statuses[0].id
    assert db.count("jobs") == 2


@pytest.mark.postgres_only(reason="counts statements with a PostgreSQL statement-level trigger")
@pytest.mark.parametrize("size", [COPY_FROM_JOBS - 1, COPY_FROM_JOBS], ids=["ENQUEUE_JOBS", "COPY_JOBS"])
def test_enqueue_many_is_one_insert_statement_in_one_transaction(store, db: Database, size: int):
    db.execute(
        """
        CREATE TABLE insert_log (statements int NOT NULL DEFAULT 0);
        INSERT INTO insert_log DEFAULT VALUES;
        CREATE FUNCTION count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE insert_log SET statements = statements + 1;
            RETURN NULL;
        END $$;
        CREATE TRIGGER count_insert AFTER INSERT ON jobs FOR EACH STATEMENT EXECUTE FUNCTION count_insert();
        """
    )

    store.enqueue_many([new_job(payload={"i": i}) for i in range(size)])

    assert db.scalar("SELECT statements FROM insert_log") == 1
    assert db.count("jobs") == size


# -- the API's submit: the token's lookup in the same statement --------------------------------


def test_a_job_enqueued_with_a_token_hash_is_the_tokens_tenants(store, db: Database, clock: FakeClock):
    store.create_token("acme", "hash-of-acme")

    status = store.enqueue(new_job(tenant="default", total=4, delay_seconds=5), token_hash="hash-of-acme")

    assert status.tenant == "acme" and db.job(status.id)["tenant"] == "acme"
    assert status == store.get(status.id, "acme")
    assert status.run_after == clock.now() + timedelta(seconds=5)
    batch = store.enqueue_many([new_job("a"), new_job("b", tenant="globex")], token_hash="hash-of-acme")
    assert [(s.kind, s.tenant) for s in batch] == [("a", "acme"), ("b", "acme")]
    assert [store.get(s.id, "acme") for s in batch] == batch


def test_an_unknown_revoked_or_admin_token_enqueues_nothing(store, db: Database):
    store.create_token("acme", "hash-of-acme")
    revoked = store.create_token("acme", "hash-of-revoked")
    store.revoke_token(revoked.id)
    store.create_token("ignored", "hash-of-admin", admin=True)

    for token_hash in ("hash-of-nobody", "hash-of-revoked", "hash-of-admin"):
        with pytest.raises(Unauthorized):
            store.enqueue(new_job(), token_hash=token_hash)
        with pytest.raises(Unauthorized):
            store.enqueue_many([new_job(idempotency_key="k"), new_job()], token_hash=token_hash)
        with pytest.raises(Unauthorized):  # a batch the size that COPY would take without a token
            store.enqueue_many([new_job() for _ in range(COPY_FROM_JOBS)], token_hash=token_hash)
    assert db.count("jobs") == 0


def test_a_token_is_refused_from_its_revocation_on(store, db: Database):
    token = store.create_token("acme", "hash-of-acme")
    store.enqueue(new_job(), token_hash="hash-of-acme")

    store.revoke_token(token.id)

    with pytest.raises(Unauthorized):
        store.enqueue(new_job(), token_hash="hash-of-acme")
    assert db.count("jobs") == 1


def test_a_used_idempotency_key_answers_the_tokens_tenants_job(store, db: Database):
    store.create_token("acme", "hash-of-acme")
    store.create_token("globex", "hash-of-globex")
    first = store.enqueue(new_job(idempotency_key="order-42", payload={"n": 1}), token_hash="hash-of-acme")
    theirs = store.enqueue(new_job(idempotency_key="order-42"), token_hash="hash-of-globex")

    again = store.enqueue(new_job(idempotency_key="order-42", payload={"n": 1}), token_hash="hash-of-acme")

    assert again == first and again.tenant == "acme"
    assert theirs.id != first.id and theirs.tenant == "globex"
    assert db.count("jobs") == 2
    assert db.job(first.id)["payload"] == {"n": 1}
