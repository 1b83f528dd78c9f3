"""What the console's pages show, computed from store reads: no I/O here.

The overview's numbers are the ones ``jobq stats`` prints (queue_stats for now,
the same finished jobs of the last hour, workers seen within 30 s), so the two
never disagree.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from markupsafe import Markup, escape

from service.jobs import Attempt, JobState, JobStatus, OutcomeBucket, QueueStats, Replay, Throughput, WorkerInfo

WINDOW_SECONDS = 3_600.0
BUCKETS = 12  # five-minute bars over the last hour
CHART_WIDTH = 120
CHART_HEIGHT = 28
MIN_BAR = 1.0  # the height of a bar whose value is above zero but too small to draw to scale


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


# -- times: one format everywhere ------------------------------------------------------------

TIME_FORMAT = "%Y-%m-%d %H:%M:%S UTC"
_ISO_INSTANT = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")


def utc_text(moment: datetime) -> str:
    """2030-01-02 03:04:05 UTC: the one way the console writes an instant."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC).strftime(TIME_FORMAT)


def relative(moment: datetime, now: datetime) -> str:
    """3 min ago, in 2.5 h, just now."""
    seconds = (now - moment).total_seconds()
    if abs(seconds) < 1:
        return "just now"
    return f"{duration(seconds)} ago" if seconds > 0 else f"in {duration(-seconds)}"


def time_tag(moment: datetime | None, now: datetime, show: str = "full") -> Markup:
    """A ``<time>``: the full UTC time (``show="full"``) or how long ago (``"ago"``) on the
    page, the other on hover, the ISO instant in ``datetime`` for scripts and tests."""
    if moment is None:
        return Markup("-")
    full, ago = utc_text(moment), relative(moment, now)
    shown, hover = (full, ago) if show == "full" else (ago, full)
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        moment.astimezone(UTC).isoformat().replace("+00:00", "Z"), hover, shown
    )


def plain_times(text: str) -> str:
    """A message with ISO instants in it (the words of `jobq explain`), in the console's format."""

    def written(found: re.Match[str]) -> str:
        return utc_text(datetime.fromisoformat(found.group(0).replace("Z", "+00:00")))

    return _ISO_INSTANT.sub(written, text)


# -- a job's page --------------------------------------------------------------------------------

TRACEBACK_TAIL = 4  # lines of an error shown before "the whole traceback"


def error_block(text: str | None) -> Markup:
    """An error's last lines (where Python puts the exception), the rest folded away."""
    if not text:
        return Markup("")
    lines = text.rstrip().splitlines()
    if len(lines) <= TRACEBACK_TAIL:
        return Markup('<pre class="error-text">{}</pre>').format(text.rstrip())
    tail = "\n".join(lines[-TRACEBACK_TAIL:])
    return Markup(
        '<pre class="error-text error-tail">{}</pre><details class="traceback"><summary>The whole error '
        '({} lines)</summary><pre class="error-text">{}</pre></details>'
    ).format(tail, len(lines), text.rstrip())


@dataclass(frozen=True)
class HistoryEntry:
    """One line of a job's history: an attempt, or a replay that started its attempts over."""

    at: datetime
    attempt: Attempt | None = None
    replay: Replay | None = None


def history(attempts: Sequence[Attempt], replays: Sequence[Replay]) -> list[HistoryEntry]:
    """Attempts and replays in the order they happened (a replay sorts before an attempt of
    the same instant: the attempt it allowed comes after it)."""
    entries = [HistoryEntry(a.started_at, attempt=a) for a in attempts]
    entries += [HistoryEntry(r.replayed_at, replay=r) for r in replays]
    return sorted(entries, key=lambda e: (e.at, e.attempt is not None))


# -- warnings ------------------------------------------------------------------------------------


def unserved(rows: Sequence[QueueRow]) -> list[QueueRow]:
    """Queues with due jobs and no live worker serving them: nothing will run them."""
    return [row for row in rows if row.due and not row.workers]


def id_text(value: object) -> Markup:
    """A full id, monospace and selected whole with one click (copyable)."""
    return Markup('<span class="mono id">{}</span>').format(escape(str(value)))


# -- the stats page: throughput, failure ratio, queue wait and run time over a range -------------


@dataclass(frozen=True)
class StatsRange:
    """A range the stats page shows: its window cut into buckets; ``daily``: read from the rollup."""

    name: str
    label: str
    seconds: float
    buckets: int
    daily: bool


STATS_RANGES = {
    r.name: r
    for r in (
        StatsRange("1h", "last hour, 5-minute bars", 3_600.0, 12, daily=False),
        StatsRange("24h", "last 24 hours, 1-hour bars", 86_400.0, 24, daily=False),
        StatsRange("7d", "last 7 days, daily bars", 7 * 86_400.0, 7, daily=True),
    )
}


@dataclass(frozen=True)
class Rect:
    """One bar (or one part of a stacked bar) of a small inline SVG chart."""

    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass(frozen=True)
class StatsRow:
    name: str
    succeeded: int
    failed: int
    failure_ratio: float | None
    mean_wait_seconds: float | None
    mean_run_seconds: float | None
    charts: dict[str, list[Rect]]  # throughput, failure-ratio, wait, run: CHART_WIDTH x CHART_HEIGHT


STATS_CHARTS = {
    "throughput": "jobs finished per bar: succeeded below, failed on top",
    "failure-ratio": "failed of finished per bar (full height: all failed)",
    "wait": "mean queue wait per bar (due to first start)",
    "run": "mean run time per bar",
}


def stats_rows(buckets: Sequence[OutcomeBucket], span: StatsRange, labels: Sequence[str]) -> list[StatsRow]:
    """One row per queue or kind with jobs in the range: its totals, means and four charts.
    ``labels`` names each bucket (its time) for the bars' hover titles. Throughput, wait and run
    charts share one scale across rows, so rows compare at a glance; the ratio's is 0 to 1."""
    by_name: dict[str, list[OutcomeBucket | None]] = {}
    for b in buckets:
        if 0 <= b.bucket < span.buckets:
            by_name.setdefault(b.name, [None] * span.buckets)[b.bucket] = b
    finished = [b.succeeded + b.failed for b in buckets]
    waits = [b.wait_seconds / b.waits for b in buckets if b.waits]
    runs = [b.run_seconds / b.runs for b in buckets if b.runs]
    tallest, longest_wait, longest_run = max(finished, default=0), max(waits, default=0.0), max(runs, default=0.0)
    rows = []
    for name in sorted(by_name):
        series = by_name[name]
        succeeded = sum(b.succeeded for b in series if b)
        failed = sum(b.failed for b in series if b)
        wait_total, wait_jobs = sum(b.wait_seconds for b in series if b), sum(b.waits for b in series if b)
        run_total, run_jobs = sum(b.run_seconds for b in series if b), sum(b.runs for b in series if b)
        rows.append(
            StatsRow(
                name=name,
                succeeded=succeeded,
                failed=failed,
                failure_ratio=failed / (succeeded + failed) if succeeded + failed else None,
                mean_wait_seconds=wait_total / wait_jobs if wait_jobs else None,
                mean_run_seconds=run_total / run_jobs if run_jobs else None,
                charts=_charts(series, labels, tallest, longest_wait, longest_run),
            )
        )
    return rows


def _charts(
    series: Sequence[OutcomeBucket | None], labels: Sequence[str], tallest: int, longest_wait: float, longest_run: float
) -> dict[str, list[Rect]]:
    width = CHART_WIDTH / len(series)
    charts: dict[str, list[Rect]] = {name: [] for name in STATS_CHARTS}

    def bar(chart: str, index: int, value: float, top: float, css: str, title: str, below: float = 0.0) -> float:
        # Any value above zero stays visible (a pixel at least) beside a row a thousand times larger.
        height = max(MIN_BAR, CHART_HEIGHT * value / top) if value > 0 and top else 0.0
        y = CHART_HEIGHT - below - height
        charts[chart].append(Rect(index * width, y, max(width - 1, 0.5), height, css, title))
        return height

    for index, (b, label) in enumerate(zip(series, labels, strict=True)):
        if b is None:
            continue
        done = b.succeeded + b.failed
        counts = f"{label}: {b.succeeded} succeeded, {b.failed} failed"
        ok_height = bar("throughput", index, b.succeeded, tallest, "ok", counts)
        bar("throughput", index, b.failed, tallest, "bad", counts, below=ok_height)
        if done:
            bar("failure-ratio", index, b.failed / done, 1.0, "bad", f"{label}: {100 * b.failed / done:.0f} % failed")
        if b.waits:
            mean = b.wait_seconds / b.waits
            bar("wait", index, mean, longest_wait, "wait", f"{label}: mean wait {duration(mean)} ({b.waits} jobs)")
        if b.runs:
            mean = b.run_seconds / b.runs
            bar("run", index, mean, longest_run, "run", f"{label}: mean run {duration(mean)} ({b.runs} jobs)")
    return charts


def bucket_labels(span: StatsRange, now: datetime) -> list[str]:
    """What each bar of a range covers, in the console's one time format."""
    if span.daily:
        first = (now.astimezone(UTC) - timedelta(days=span.buckets - 1)).date()
        return [f"{first + timedelta(days=n)} (UTC day)" for n in range(span.buckets)]
    width = span.seconds / span.buckets
    start = now - timedelta(seconds=span.seconds)
    return [
        f"{utc_text(start + timedelta(seconds=n * width))} to {utc_text(start + timedelta(seconds=(n + 1) * width))}"
        for n in range(span.buckets)
    ]
