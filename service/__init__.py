"""jobq: a job queue for long-running work, stored in PostgreSQL or SQLite.

The public names: the handler API (App, JobContext, PermanentError, …) for
workers, Client for submitting and watching jobs over the REST API, and Queue
for doing the same from Python straight on the database (inside the caller's
transaction on PostgreSQL).
"""

from typing import TYPE_CHECKING, Any

from service.client import Client
from service.errors import JobCancelled, JobFailed, JobqError, PermanentError
from service.worker import App, JobContext, JobStopped, StopReason

if TYPE_CHECKING:
    from service.queue import Queue

__all__ = [
    "App",
    "Client",
    "JobCancelled",
    "JobContext",
    "JobFailed",
    "JobStopped",
    "JobqError",
    "PermanentError",
    "Queue",
    "StopReason",
]


def __getattr__(name: str) -> Any:
    # Queue loads the stores and the settings; a worker or a client that never names it skips them.
    if name == "Queue":
        from service.queue import Queue

        return Queue
    raise AttributeError(f"module 'service' has no attribute {name!r}")
