"""One ``store.unavailable``/``store.available`` pair per outage, with its true length, through a
real PostgreSQL stop and start. The server is a private cluster made for this test (initdb as
user postgres into a temporary folder, its own port): the shared test server is never stopped."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from service.store import migrate
from tests.private_postgres import PrivateServer, private_server  # noqa: F401 (the fixture)
from tests.worker.harness import WorkerProcess, wait_until

pytestmark = pytest.mark.slow


def test_a_server_stop_is_one_outage_with_its_true_length(
    private_server: PrivateServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    migrate.upgrade(private_server.url)
    worker = WorkerProcess(
        # An idle worker's polls back off (to 5 s alone) and its check-in comes every 5-15 s: so --max-poll-seconds
        # 0.5. Its first call of the outage fails at once (it waited the pool's 10 s before, 4 Dec).
        private_server.url, tmp_path, "outage", ["--lease-seconds", "2", "--poll-seconds", "0.2",
                                                 "--max-poll-seconds", "0.5"],
        app="service.examples",
    )  # fmt: skip
    try:
        worker.wait_started()
        private_server.stop()
        stopped = time.monotonic()
        wait_until(lambda: worker.events("store.unavailable"), 10, what="the worker to see the outage")
        time.sleep(3)  # maintenance ticks every 0.2 s and reaps every ~1 s meanwhile: none may end it
        assert not worker.events("store.available"), worker.log()
        private_server.start()
        back = wait_until(lambda: worker.events("store.available"), 30, what="the worker to see the database back")
        down_for = time.monotonic() - stopped
        time.sleep(1)  # a second pair, if any, would come within the next ticks
        assert len(worker.events("store.unavailable")) == 1 and len(worker.events("store.available")) == 1, worker.log()
        assert 3 <= back[0]["down_s"] <= down_for + 0.5, (back, down_for)
        assert worker.alive()
    finally:
        worker.terminate()
        assert worker.wait(30) == 0, worker.log()
