"""The worker's JSON lines: one encoder, the job-event fast path, the writer thread, what SIGKILL loses."""

from __future__ import annotations

import json
import logging
import mmap
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.jobs import ClaimedJob, Lease
from service.worker import logs

ROOT = Path(__file__).resolve().parents[2]


def _job(kind: str, queue: str) -> ClaimedJob:
    return ClaimedJob(
        lease=Lease(job_id=uuid.uuid4(), owner="h:1:a", attempt=2),
        kind=kind,
        queue=queue,
        tenant="t",
        payload={},
        checkpoint=None,
        done=0,
        total=None,
        max_attempts=3,
        lease_expires_at=datetime.now(UTC),
    )


@pytest.mark.parametrize("duration", [None, 0.0012, 75.25])
@pytest.mark.parametrize("fields", [{}, {"error": 'a "quoted"\nline', "max_attempts": 3, "run_after": None}])
def test_a_job_events_fast_line_is_the_encoders_line(duration: float | None, fields: dict) -> None:
    job = _job('odd "kind" é', "quéue\t1")
    created = 1_800_000_000.9999997  # its microseconds round up into the next second
    fast = logs._job_line(created, logging.WARNING, "job.retrying", job, "h:1:a", duration, fields)
    values = {"worker": "h:1:a", "job_id": str(job.id), "kind": job.kind, "queue": job.queue, "attempt": 2}
    if duration is not None:
        values["duration_s"] = round(duration, 3)
    values.update(fields)
    assert fast == logs.encode_line(created, logging.WARNING, logs.LOGGER_NAME, "job.retrying", values)
    parsed = json.loads(fast)
    assert parsed["ts"] == "2027-01-15T08:00:01.000+00:00"
    assert parsed["kind"] == job.kind and parsed["queue"] == job.queue


def _child(code: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    out = open(log, "wb")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), *args],
            stderr=out,
            stdout=subprocess.DEVNULL,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    finally:
        out.close()


def test_every_line_is_written_in_order_by_a_normal_exit(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    child = _child(
        """
        import logging, sys
        from service.worker.logs import configure_logging, log_event
        configure_logging("info")
        for i in range(20000):
            log_event("tick", seq=i)
            if i == 10000:
                logging.getLogger("other").warning("from the logging module")
        sys.exit(3)
    """,
        log,
    )
    assert child.wait(60) == 3
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["seq"] for line in lines if line["event"] == "tick"] == list(range(20000))
    other = next(i for i, line in enumerate(lines) if line["logger"] == "other")
    assert lines[other - 1]["seq"] == 10000  # one writer: the logging module's records keep their place


@pytest.mark.slow
def test_sigkill_loses_only_the_last_few_milliseconds_of_lines(tmp_path: Path) -> None:
    """The child logs an event every ~0.1 ms and counts them in shared memory; after a SIGKILL
    the lines missing from the file are those of the last moments only."""
    log, counter = tmp_path / "worker.log", tmp_path / "counter"
    counter.write_bytes(b"\0" * 8)
    child = _child(
        """
        import mmap, struct, sys, time
        from service.worker.logs import configure_logging, log_event
        configure_logging("info")
        with open(sys.argv[1], "r+b") as f:
            shared = mmap.mmap(f.fileno(), 8)
        i = 0
        while True:
            log_event("tick", seq=i)
            i += 1
            shared[:8] = struct.pack("q", i)
            end = time.perf_counter() + 0.0001
            while time.perf_counter() < end:
                pass
    """,
        log,
        str(counter),
    )
    with open(counter, "r+b") as f:
        shared = mmap.mmap(f.fileno(), 8)
    try:
        deadline = time.monotonic() + 60  # a loaded machine may take seconds just to start the child
        while struct.unpack("q", shared[:8])[0] < 1000 and time.monotonic() < deadline:
            time.sleep(0.05)
        started, before = time.monotonic(), struct.unpack("q", shared[:8])[0]
        time.sleep(1.0)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    logged = struct.unpack("q", shared[:8])[0]
    written = [json.loads(line)["seq"] for line in log.read_text().splitlines() if line.endswith("}")]
    assert written == list(range(len(written)))
    lost = logged - len(written)
    rate = (logged - before) / (time.monotonic() - started)  # lines per second in the last second
    assert logged >= 1000, "the child never got going"
    # GATHER_SECONDS (2 ms), then the GIL: the writer waits up to the switch interval (5 ms) for
    # it each time it wakes, so a CPU-bound child loses ~20-40 ms of lines; a batching writer
    # that buffered for a second, or until exit, would lose far more.
    assert lost <= max(50, rate * 0.2), f"{lost} of {logged} lines lost ({rate:.0f} lines/s)"
