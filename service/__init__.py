"""jobq: a job queue for long-running work, stored in PostgreSQL or SQLite."""

from service.errors import JobqError, PermanentError

__all__ = ["JobqError", "PermanentError"]
