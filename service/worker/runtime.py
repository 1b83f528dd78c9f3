"""The worker process: claim for free slots, run handlers in threads, keep leases, shut down cleanly.

:class:`Worker` puts the parts together and runs one job's attempt; each part is its own module.
Threads of one worker process:

- the claim loop (:mod:`service.worker.claimer`; the thread that calls :meth:`Worker.run`,
  the main thread under ``jobq worker``): claims up to the number of free slots
  (:mod:`service.worker.slots`) in one statement, hands each job to a job thread, then
  sleeps until a slot frees, a wake-up arrives or the poll interval passes (backing off
  while idle, when a look is one cheap probe);
- job threads, at most one per slot, reused from job to job
  (:class:`~service.worker.finisher.JobThreads`): each runs a handler
  (:mod:`service.worker.executor`); a failure, cancellation or hand-back is
  written from there by the settler (:mod:`service.worker.settler`), a success is handed to
- the finisher (:mod:`service.worker.finisher`): writes successes in batches, one
  ``complete_and_claim`` for all that are waiting and those due within a window that
  pays (a lone one at once), with the claim that refills their slots;
- the lease keeper (:mod:`service.worker.lease_keeper`): heartbeats and progress;
- the listener (:mod:`service.worker.listener`): LISTEN on ``JOBS_QUEUED`` (PostgreSQL),
  wakes the claim loop;
- maintenance (:mod:`service.maintenance.duties`): the leadership lease and the workers-table
  touch on every worker; the reaper, the rollup's fold, the schedules and, with a retention,
  the pruner only on the fleet's leader, each at its own interval.

Database connections: all threads share the store's pool (``JOBQ_POOL_SIZE``,
default 1) and take a connection only for one statement; the listener holds one
more of its own (none with ``JOBQ_NOTIFY=false``). So a PostgreSQL worker uses at
most ``pool_size + 1`` = 2 connections whatever its ``--concurrency``, 1 behind a
pooler; a handler never holds one of them.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from service.errors import InvalidInput, StoreUnavailable
from service.jobs import MAX_PAGE_SIZE, ClaimedJob, ClaimRequest, ItemPage, ItemQuery, JobItem, WorkerInfo
from service.maintenance.duties import (
    REAP_SECONDS,
    RETENTION_BATCH,
    RETENTION_EVERY,
    Maintenance,
    worker_duties,
)
from service.maintenance.leadership import LEASE_SECONDS as LEADER_LEASE_SECONDS
from service.maintenance.leadership import Leadership
from service.maintenance.presence import Presence
from service.maintenance.pruner import ROLLUP_RETENTION_SECONDS, Pruner
from service.maintenance.reaper import Reaper
from service.maintenance.scheduler import Scheduler
from service.payloads import check_lease_seconds
from service.retry import RetryPolicy
from service.store.base import Store
from service.worker.backoff import Backoff
from service.worker.claimer import ClaimLoop, IdlePolls
from service.worker.context import StopReason
from service.worker.executor import Failed, Stopped, Succeeded, execute
from service.worker.finisher import Finisher, JobThreads
from service.worker.health import StoreHealth
from service.worker.lease_keeper import LeaseKeeper
from service.worker.listener import WakeupListener
from service.worker.logs import job_event, log_event
from service.worker.registry import App
from service.worker.running import Phase, RunningJob
from service.worker.settler import Settler
from service.worker.slots import Slots

RESIGN_WAIT_SECONDS = 5.0
"""At shutdown, how long the maintenance thread may take to finish its duty before the
worker resigns the leadership (past it, the worker leaves and the lease runs out)."""

MAX_POLL_SECONDS = 5.0
"""The idle worker's longest wait between looks (WorkerConfig.max_poll_seconds)."""


def connections_per_process(pool_size: int, listen: bool = True) -> int:
    """PostgreSQL connections one worker process opens at most (see the module docstring)."""
    return pool_size + (1 if listen else 0)


@dataclass(frozen=True)
class WorkerConfig:
    queues: tuple[str, ...] | None = None
    """Queues to claim from; None: the queues the app's handlers name."""
    concurrency: int = 4
    """Jobs run at once (threads); the worker never claims more than it has free slots."""
    lease_seconds: float = 60.0
    """Lease taken at claim and renewed by heartbeats (every third of it)."""
    grace_seconds: float = 30.0
    """On SIGTERM/SIGINT: how long running jobs may finish before they are handed back.
    Also how long a job told to stop (cancel, timeout) may take before the worker settles it."""
    poll_seconds: float = 2.0
    """Claim at least this often (+-50 % jitter) even without a wake-up, while claims find work."""
    max_poll_seconds: float = MAX_POLL_SECONDS
    """An idle worker's waits between looks back off to this (full jitter: uniform in [0, it]);
    its look is then one probe of the claim's index. The first claim that finds work makes
    it poll every ``poll_seconds`` again."""
    reap_seconds: float | None = None
    """How often this worker reaps expired leases (+-50 % jitter); None: every 2 s (half the
    lease if that is shorter, at least 0.5 s). A killed worker's job then runs again at most
    ~3 s after its lease expired; the probe when nothing expired is one partial-index read
    of the running jobs (docs/PERFORMANCE.md, ``bench reap``)."""
    flush_seconds: float = 0.5
    """Progress reaches the database about this long after a handler reports it."""
    touch_seconds: float = 15.0
    """The longest wait between the worker's check-ins (service.maintenance.presence), each of
    which marks it alive in the workers table (WORKER_ALIVE_SECONDS, 45 s, is three of them);
    a candidate checks in sooner when the leadership's lease is due to end, the leader at each
    renewal. Also how often the leader folds the rollup while there is work to fold."""
    retention_seconds: float | None = None
    """Delete terminal jobs that finished longer ago than this, RETENTION_BATCH of the oldest
    every ~``retention_every`` seconds, so history leaves as it expires instead of a day at a
    time from cron, and the rollup's days past ROLLUP_RETENTION_SECONDS (or this, if longer)
    hourly. None: keep everything (``jobq prune``)."""
    retention_every: float = RETENTION_EVERY
    leader_lease_seconds: float = LEADER_LEASE_SECONDS
    """The maintenance leadership's lease: when the leading worker dies or is cut off, another
    takes over the reaper, the schedules, the rollup and retention within it (plus a tenth)."""
    listen: bool = True
    """Wake on LISTEN/NOTIFY (PostgreSQL). Off behind PgBouncer in transaction mode."""
    worker_id: str | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise InvalidInput("concurrency must be at least 1")
        check_lease_seconds(self.lease_seconds, "lease seconds")
        if self.grace_seconds < 0:
            raise InvalidInput("grace seconds must not be negative")
        if self.poll_seconds <= 0:
            raise InvalidInput("poll seconds must be positive")
        if self.max_poll_seconds <= 0:
            raise InvalidInput("the longest poll interval must be positive")
        if self.queues is not None and (not self.queues or not all(q.strip() for q in self.queues)):
            raise InvalidInput("queues must be non-empty names")
        if not self.retention_every > 0:
            raise InvalidInput("the retention's interval must be positive")
        if not self.leader_lease_seconds > 0:
            raise InvalidInput("the leadership's lease must be positive")

    @property
    def reap_every(self) -> float:
        if self.reap_seconds is not None:
            return self.reap_seconds
        return min(REAP_SECONDS, max(0.5, self.lease_seconds / 2))


def make_worker_id() -> str:
    """``host:pid:suffix``: readable in the workers table, unique across restarts."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    """One worker process's machinery. ``run()`` blocks until shutdown and returns the exit code."""

    def __init__(
        self,
        store: Store,
        app: App,
        config: WorkerConfig | None = None,
        *,
        retry_policy: RetryPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.app = app
        self.config = config or WorkerConfig()
        self.id = self.config.worker_id or make_worker_id()
        self.queues = tuple(self.config.queues or app.queues)
        self.kinds = app.kinds
        self.retry_policy = retry_policy or RetryPolicy()
        self.clock = clock
        self.health = StoreHealth(self.id)
        self._halt = threading.Event()  # background threads end
        self._signals = 0
        self._threads: list[threading.Thread] = []
        self._job_threads = JobThreads(self._run_job)
        # Each claim writes the kinds' max_attempts into the jobs it takes (a kind's default and
        # ceiling); the app's handlers are fixed once a worker runs, so they are read once.
        request = ClaimRequest(
            self.id,
            self.queues,
            self.config.concurrency,
            self.config.lease_seconds,
            self.kinds,
            tuple(sorted(app.max_attempts.items())),
        )
        self.slots = Slots(
            app,
            request,
            self.config.concurrency,
            start=self._job_threads.submit,
            clock=clock,
            max_payload_bytes=store.max_payload_bytes,
        )
        self.keeper = LeaseKeeper(
            store,
            self.id,
            self.slots.held,
            health=self.health,
            on_overdue=self._settle_overdue,
            flush_seconds=self.config.flush_seconds,
            stop_grace=self.config.grace_seconds,
            tick_seconds=min(0.1, self.config.lease_seconds / 10),
            clock=clock,
        )
        self.settler = Settler(store, self.id, self.health, self.retry_policy, clock=clock)
        self.finisher = Finisher(store, self.settler, self.slots, clock=clock)
        scheduler = Scheduler(store, app.schedules, leader=lambda: self.leadership.token())
        # The worker's one periodic statement: its touch, the leadership, its peers, the next schedule.
        self.presence = Presence(store, self.id, self.config.leader_lease_seconds, schedule_due_in=scheduler.expect)
        self.claimer = ClaimLoop(
            store,
            self.slots,
            self.health,
            IdlePolls(self.config.poll_seconds, self.config.max_poll_seconds, peers=lambda: self.presence.peers),
            clock=clock,
        )
        self.listener = WakeupListener(store, self.id, self.queues, self.claimer.notified)
        # One worker of the fleet at a time runs the fleet's maintenance (service.maintenance.leadership),
        # asked for with the check-in.
        self.leadership = Leadership(
            store,
            self.id,
            lease_seconds=self.config.leader_lease_seconds,
            acquire=self.presence.check_in,
            longest_wait=self.config.touch_seconds,
        )
        retention = self.config.retention_seconds
        # Built here, not in the maintenance thread: the Pruner's own check of the retention
        # raises at construction (a bad retention would otherwise end that thread).
        pruner = (
            None
            if retention is None
            else Pruner(
                store,
                retention,
                batch=RETENTION_BATCH,
                rollup_older_than_seconds=max(retention, ROLLUP_RETENTION_SECONDS),
                leader=self.leadership.token,
            )
        )
        self.maintenance = Maintenance(
            worker_duties(
                store,
                self.id,
                leadership=self.leadership,
                reaper=Reaper(store, self.retry_policy, leader=self.leadership.token),
                scheduler=scheduler,
                pruner=pruner,
                reap_every=self.config.reap_every,
                rollup_every=self.config.touch_seconds,
                retention_every=self.config.retention_every,
                jobs_requeued=self.slots.wake.set,
                jobs_running=lambda: self.presence.jobs_running,
                clock=clock,
            ),
            self.health,
            worker_id=self.id,
            is_leader=self.leadership.is_leader,
            lost=self.leadership.lost,
            clock=clock,
        )
        self.started = threading.Event()  # registered and claiming (tests wait on it)

    # -- public ------------------------------------------------------------------------
    def held(self) -> list[RunningJob]:
        return self.slots.held()

    @property
    def busy(self) -> int:
        return self.slots.busy

    @property
    def claimed(self) -> int:
        return self.slots.claimed

    def shutdown(self) -> None:
        """Stop claiming; ``run`` then gives running jobs the grace period and returns."""
        if not self.slots.stopping.is_set():
            log_event("worker.stopping", worker=self.id, running=self.busy, grace_s=self.config.grace_seconds)
        self.slots.stop()

    def run(self, *, install_signal_handlers: bool = True) -> int:
        if install_signal_handlers:
            self._install_signal_handlers()
        try:
            if not self._register():
                return 0  # told to stop before the database ever answered
            self._start_background()
            self.started.set()
            log_event(
                "worker.started",
                worker=self.id,
                queues=list(self.queues),
                kinds=list(self.kinds),
                concurrency=self.config.concurrency,
                lease_s=self.config.lease_seconds,
            )
            self.claimer.run()
            self._drain()
        finally:
            self._halt.set()
            self._job_threads.stop()
            self.slots.wake.set()
            self.listener.close()
        self._resign()
        self._deregister()
        log_event("worker.stopped", worker=self.id, claimed=self.claimed)
        return 0

    # -- signals -----------------------------------------------------------------------
    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:
            # A second signal: leave now. Held leases expire and other workers reap them.
            log_event(
                "worker.exit_now",
                logging.WARNING,
                worker=self.id,
                signal=signal.Signals(signum).name,
                running=self.busy,
            )
            logging.shutdown()
            os._exit(128 + signum)
        log_event("worker.signal", worker=self.id, signal=signal.Signals(signum).name)
        self.shutdown()

    # -- one job -----------------------------------------------------------------------
    def _run_job(self, running: RunningJob) -> None:
        handed_over = False
        try:
            if running.job.items_ok or running.job.items_failed:
                running.ctx.resume_items(self._earlier_items(running.job))
            outcome = execute(running.spec, running.ctx)
            if running.begin_finish():
                if isinstance(outcome, Succeeded):
                    # The finisher writes it with whatever else finished meanwhile, then frees the slot.
                    self.finisher.put(running, outcome.result, self.clock() - running.started)
                    handed_over = True
                else:
                    self._settle(running, outcome)
            else:
                job_event(
                    "job.discarded",
                    running.job,
                    self.id,
                    duration=self.clock() - running.started,
                    reason=(running.ctx.stop_reason or StopReason.LEASE_LOST).value,
                    detail="the worker no longer holds this attempt; what the handler produced is dropped",
                )
        except Exception:
            log_event("worker.job_error", logging.ERROR, exc_info=True, worker=self.id, job_id=str(running.job.id))
        finally:
            if not handed_over:
                self.slots.release(running)

    def _earlier_items(self, job: ClaimedJob) -> list[JobItem]:
        """The item outcomes earlier attempts stored (a resumed job skips those items): read
        only for a job whose row counts some, before its handler starts."""
        found: list[JobItem] = []
        after: int | None = None
        while True:
            query = ItemQuery(job_id=job.id, after_index=after, limit=MAX_PAGE_SIZE)

            def read(q: ItemQuery = query) -> ItemPage:
                return self.store.list_items(q)

            page = self.settler.persist(read)
            found.extend(page.items)
            if page.next_after_index is None:
                return found
            after = page.next_after_index

    def _settle(self, running: RunningJob, outcome: Failed | Stopped) -> None:
        """Item outcomes not yet written go first, fenced like the rest; then the outcome."""
        self.keeper.renew(running, wait=True)
        self.settler.settle(running, outcome)

    def _settle_overdue(self, running: RunningJob) -> None:
        """A handler told to stop (cancel, timeout) did not return within the grace period:
        write its outcome now, in a thread of its own; the handler's thread keeps its slot."""
        if not running.begin_finish():
            return
        reason = running.ctx.stop_reason or StopReason.CANCELLED
        job_event(
            "job.overdue",
            running.job,
            self.id,
            level=logging.WARNING,
            reason=reason.value,
            detail="the handler ignored the stop request; settled without it",
        )
        threading.Thread(target=self._settle, args=(running, Stopped(reason)), name="jobq-overdue", daemon=True).start()

    # -- shutdown ----------------------------------------------------------------------
    def _drain(self) -> None:
        """Running jobs get the grace period; those still running are handed back at once."""
        deadline = self.clock() + self.config.grace_seconds
        while self.clock() < deadline and any(r.phase is Phase.RUNNING for r in self.held()):
            time.sleep(0.05)
        release_deadline = self.clock() + max(5.0, self.config.lease_seconds / 3)
        for running in self.held():
            if not running.begin_finish():
                continue
            running.ctx.request_stop(StopReason.SHUTDOWN)
            self.keeper.renew(running, wait=True)  # the item outcomes so far stay done
            self.settler.hand_back(running, release_deadline)
        # Outcomes being written by job threads: a short, bounded wait.
        finish_deadline = self.clock() + 10.0
        while self.clock() < finish_deadline and any(r.phase is Phase.FINISHING for r in self.held()):
            time.sleep(0.05)

    # -- registration --------------------------------------------------------------------
    def _info(self) -> WorkerInfo:
        return WorkerInfo(
            id=self.id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            kinds=self.kinds,
            concurrency=self.config.concurrency,
        )

    def _register(self) -> bool:
        backoff = Backoff(cap=10.0)
        while not self.slots.stopping.is_set():
            try:
                self.store.register_worker(self._info())
                self.health.ok()
                return True
            except StoreUnavailable as exc:
                self.health.failed(exc, "register")
                self.slots.stopping.wait(backoff.next())
        return False

    def _resign(self) -> None:
        """Hand the leadership on at once (a successor need not wait out the lease), once the
        maintenance thread has stopped, so it cannot take the lease again after the resignation."""
        for thread in self._threads:
            if thread.name == "jobq-maintenance":
                thread.join(RESIGN_WAIT_SECONDS)
                if thread.is_alive():
                    return  # a duty still running: the lease runs out on its own
        self.leadership.resign()

    def _deregister(self) -> None:
        try:
            self.store.deregister_worker(self.id)
        except StoreUnavailable as exc:
            log_event("worker.deregister_failed", logging.WARNING, worker=self.id, error=str(exc))

    # -- background threads ----------------------------------------------------------------
    def _start_background(self) -> None:
        targets: list[tuple[str, Callable[[], None]]] = [
            ("jobq-keeper", lambda: self.keeper.run(self._halt)),
            ("jobq-finisher", lambda: self.finisher.run(self._halt)),
            ("jobq-maintenance", lambda: self.maintenance.run(self._halt)),
        ]
        if self.config.listen:
            targets.append(("jobq-listener", lambda: self.listener.run(self._halt)))
        for name, target in targets:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
