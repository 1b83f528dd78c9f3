"""jobq: a job queue for long-running work, stored in PostgreSQL or SQLite."""

from service.errors import JobqError, PermanentError
from service.worker import App, JobContext, JobStopped, StopReason

__all__ = ["App", "JobContext", "JobStopped", "JobqError", "PermanentError", "StopReason"]
