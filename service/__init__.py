"""jobq: a job queue for long-running work, stored in PostgreSQL or SQLite.

The public names: the handler API (App, JobContext, PermanentError, …) for
workers, and Client for submitting and watching jobs over the REST API.
"""

from service.client import Client
from service.errors import JobCancelled, JobFailed, JobqError, PermanentError
from service.worker import App, JobContext, JobStopped, StopReason

__all__ = [
    "App",
    "Client",
    "JobCancelled",
    "JobContext",
    "JobFailed",
    "JobStopped",
    "JobqError",
    "PermanentError",
    "StopReason",
]
