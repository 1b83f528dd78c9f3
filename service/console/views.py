"""What the console's pages show, computed from store reads: no I/O here.

The overview's numbers are the ones ``jobq stats`` prints (queue_stats for now,
the same finished jobs of the last hour, workers seen within 30 s), so the two
never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.jobs import JobState, JobStatus, QueueStats, Throughput, WorkerInfo

WINDOW_SECONDS = 3_600.0
BUCKETS = 12  # five-minute bars over the last hour
CHART_WIDTH = 120
CHART_HEIGHT = 28


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    succeeded_height: float
    failed_height: float
    title: str


@dataclass(frozen=True)
class QueueRow:
    queue: str
    queued: int
    due: int
    waiting: int  # queued but not due yet: a delay or a retry's backoff
    running: int
    succeeded: int
    failed: int
    failure_ratio: float | None
    oldest_due_age_seconds: float | None
    workers: int
    bars: list[Bar]


def queue_rows(
    stats: Sequence[QueueStats], throughput: Sequence[Throughput], workers: Sequence[WorkerInfo]
) -> list[QueueRow]:
    """One row per queue that has active jobs, recent outcomes or a live worker."""
    by_queue = {s.queue: s for s in stats}
    buckets: dict[str, list[tuple[int, int]]] = {}
    for t in throughput:
        buckets.setdefault(t.queue, [(0, 0)] * BUCKETS)[t.bucket] = (t.succeeded, t.failed)
    names = sorted(set(by_queue) | set(buckets) | {q for w in workers for q in w.queues})
    tallest = max((s + f for counts in buckets.values() for s, f in counts), default=0)
    rows = []
    for name in names:
        stat = by_queue.get(name) or QueueStats(name, 0, 0, None)
        counts = buckets.get(name, [(0, 0)] * BUCKETS)
        succeeded = sum(s for s, _ in counts)
        failed = sum(f for _, f in counts)
        rows.append(
            QueueRow(
                queue=name,
                queued=stat.queued,
                due=stat.due,
                waiting=stat.queued - stat.due,
                running=stat.running,
                succeeded=succeeded,
                failed=failed,
                failure_ratio=failed / (succeeded + failed) if succeeded + failed else None,
                oldest_due_age_seconds=stat.oldest_queued_age_seconds,
                workers=sum(1 for w in workers if name in w.queues),
                bars=_bars(counts, tallest),
            )
        )
    return rows


def _bars(counts: Sequence[tuple[int, int]], tallest: int) -> list[Bar]:
    """Stacked bars (succeeded below, failed on top), one per bucket, on one scale for all queues."""
    width = CHART_WIDTH / BUCKETS
    minutes = int(WINDOW_SECONDS / 60 / BUCKETS)
    bars = []
    for index, (succeeded, failed) in enumerate(counts):
        scale = CHART_HEIGHT / tallest if tallest else 0.0
        ago = (BUCKETS - index) * minutes
        bars.append(
            Bar(
                x=index * width,
                width=width - 1,
                succeeded_height=succeeded * scale,
                failed_height=failed * scale,
                title=f"{ago}-{ago - minutes} min ago: {succeeded} succeeded, {failed} failed",
            )
        )
    return bars


def duration(seconds: float | None) -> str:
    """3 s, 4 min, 2.5 h, 3 d: an age at a glance."""
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5_400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"


def percent(status: JobStatus) -> float | None:
    """Progress in percent when the job has a total (None: it reports done only)."""
    if not status.total:
        return 100.0 if status.state is JobState.SUCCEEDED and status.total == 0 else None
    return min(100.0, 100.0 * status.done / status.total)
