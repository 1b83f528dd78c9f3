"""The worker's hot path on PostgreSQL, counted on the wire (libpq's protocol trace): a claim,
and a completion with the claim that refills its slots, each send one Sync — one round trip
and one transaction — and leave none of the claim's planner settings behind."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from service.jobs import ClaimRequest, Completion
from tests.store.builders import new_job

pytestmark = pytest.mark.postgres_only(reason="counts PostgreSQL protocol messages")


@contextmanager
def sent(store: Any, path: Path) -> Iterator[list[str]]:
    """The names of the messages the store's one pooled connection sends in the block."""
    messages: list[str] = []
    with path.open("w") as trace:
        with store._pool.connection() as conn:
            conn.pgconn.trace(trace.fileno())
        try:
            yield messages
        finally:
            with store._pool.connection() as conn:
                conn.pgconn.untrace()  # flushes the trace
    # A line per message: [timestamp] F|B <length> <message> ...; F is the frontend, the store.
    messages += re.findall(r"^(?:[^\t\n]*\t)?F\t\d+\t(\w+)", path.read_text(), flags=re.MULTILINE)


def test_a_claim_is_one_round_trip_and_leaves_no_setting_behind(make_store, store_url, tmp_path: Path):
    store = make_store(store_url, pool_size=1)
    store.enqueue_many([new_job() for _ in range(3)])

    with sent(store, tmp_path / "trace") as messages:
        claimed = store.claim("worker-a", ["default"], 2, 30)

    assert len(claimed) == 2
    assert messages.count("Sync") == 1, messages
    assert "Query" not in messages, messages  # no BEGIN or COMMIT of its own
    with store._pool.connection() as conn:
        settings = conn.execute(
            "SELECT current_setting('enable_seqscan') AS seqscan, current_setting('enable_hashjoin') AS hashjoin"
        ).fetchone()
    assert settings == {"seqscan": "on", "hashjoin": "on"}


def test_a_completion_and_its_refill_are_one_round_trip(make_store, store_url, tmp_path: Path):
    store = make_store(store_url, pool_size=1)
    store.enqueue_many([new_job() for _ in range(3)])
    [job] = store.claim("worker-a", ["default"], 1, 30)

    with sent(store, tmp_path / "trace") as messages:
        lost, claimed = store.complete_and_claim(
            [Completion(job.lease, {"ok": True})], ClaimRequest("worker-a", ("default",), 1, 30)
        )

    assert lost == [] and len(claimed) == 1
    assert store.get(job.id).state.value == "succeeded"
    assert messages.count("Sync") == 1, messages
