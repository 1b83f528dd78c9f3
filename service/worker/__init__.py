"""The worker: runs handlers for the kinds an :class:`App` registers, under leases.

Layers (each its own module):

- ``registry``   :class:`App` and the ``@app.handler(kind, ...)`` decorator; ``load_app("module:attr")``
- ``context``    :class:`JobContext`, what a handler gets: job id, payload, progress, checkpoints,
                 ``items()``, stop signals
- ``executor``   runs one handler (sync, or async on its own loop) and returns an Outcome
- ``lease_keeper`` heartbeats every held lease with the latest progress; stops handlers whose
                 lease is gone or whose job was cancelled
- ``runtime``    :class:`Worker`: puts the parts together; one job's attempt; graceful shutdown
- ``slots``      the jobs holding slots, and the claim that refills free ones (the claim loop's and
                 the finisher's)
- ``claimer``    the claim loop: free slots only; an idle worker backs off and probes before it claims
- ``listener``   LISTEN/NOTIFY wake-ups (PostgreSQL)
- ``settler``    writes a failure (with the retry decision), a cancel or a hand-back, fenced
- ``finisher``   writes successes in batches (one ``complete_many`` for all that are waiting,
                 a lone one at once); handler threads reused from job to job

Database connections per worker process (PostgreSQL): the store's pool
(``JOBQ_POOL_SIZE``, default 2), shared by the claim loop, the keeper, the maintenance
duties (:mod:`service.maintenance.duties`) and the job threads, each taking a connection for one statement only, plus one
dedicated LISTEN connection: **at most 3 per process** at the defaults, whatever
``--concurrency`` is. Handlers never hold one. A PostgreSQL with
``max_connections = 100`` and some left for the API therefore carries about 30
worker processes. LISTEN needs a session of its own: behind PgBouncer in
transaction mode, set ``JOBQ_NOTIFY=false`` (no listener; polling alone).
"""

from service.worker.context import JobContext, JobStopped, StopReason
from service.worker.registry import App, HandlerSpec, load_app
from service.worker.runtime import (
    Worker,
    WorkerConfig,
    connections_per_process,
    make_worker_id,
)

__all__ = [
    "App",
    "HandlerSpec",
    "JobContext",
    "JobStopped",
    "StopReason",
    "Worker",
    "WorkerConfig",
    "connections_per_process",
    "load_app",
    "make_worker_id",
]
