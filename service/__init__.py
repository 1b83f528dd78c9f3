"""jobq: a job queue for long-running work, stored in PostgreSQL or SQLite.

The public names: the handler API (App, JobContext, PermanentError, …) for
workers, Client for submitting and watching jobs over the REST API, and Queue
for doing the same from Python straight on the database (inside the caller's
transaction on PostgreSQL); AsyncQueue the same for asyncio code.

Importing ``service`` loads only the exception tree: each other name loads its
layer when first used, so ``jobq status`` never pays for the worker or the HTTP
client, nor a handler module for the client.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from service.errors import JobCancelled, JobFailed, JobqError, PermanentError

if TYPE_CHECKING:
    from service.client import Client
    from service.jobs import NewJob
    from service.queue import AsyncQueue, Queue
    from service.worker import App, JobContext, JobStopped, StopReason
    from service.workflows import chain, group

__all__ = [
    "App",
    "AsyncQueue",
    "Client",
    "JobCancelled",
    "JobContext",
    "JobFailed",
    "JobStopped",
    "JobqError",
    "NewJob",
    "PermanentError",
    "Queue",
    "StopReason",
    "chain",
    "group",
]

_LAZY = {
    "App": "service.worker",
    "JobContext": "service.worker",
    "JobStopped": "service.worker",
    "StopReason": "service.worker",
    "Client": "service.client",
    "Queue": "service.queue",
    "AsyncQueue": "service.queue",
    "NewJob": "service.jobs",
    "chain": "service.workflows",
    "group": "service.workflows",
}


def __getattr__(name: str) -> Any:
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'service' has no attribute {name!r}")
    return getattr(import_module(home), name)
