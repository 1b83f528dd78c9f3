"""The one exception tree of jobq.

    JobqError
     ├── InvalidInput            bad arguments: nothing was written
     │    └── PayloadTooLarge    a request body or payload over its byte limit (HTTP 413)
     │         └── ResultTooLarge a handler's result (or an item's) over JOBQ_MAX_RESULT_BYTES: the attempt fails for good
     ├── Unauthorized            no valid API token: missing, unknown or revoked (HTTP 401)
     ├── NotFound
     │    ├── JobNotFound        no such job for this tenant (another tenant's job is "not found" too)
     │    ├── TokenNotFound      no such API token
     │    ├── LimitNotFound      no limit is set on that scope
     │    └── ScheduleNotFound   no periodic schedule has that name
     ├── InvalidTransition       the job's state does not allow it (cancel a finished job, read a result too early)
     ├── IdempotencyConflict     the idempotency key was used for a different job
     ├── LeaseLost               the fencing token no longer holds the job: the write changed nothing
     ├── LeadershipLost          the leader's token no longer holds its leadership: the write changed nothing
     ├── StoreUnavailable        the database could not be reached or gave a transient error; safe to retry
     │    └── SchemaMismatch     the schema is behind this release, or ahead of it and not marked compatible
     ├── PermanentError          raised by a handler: fail the job now, do not retry
 ├── TooManyItemFailures     more items failed than the kind's max_item_failures: the attempt fails, retryable
     ├── JobFailed               (client) the job ended failed; carries its status and error
     └── JobCancelled            (client) the job ended cancelled

Driver exceptions never escape the store: each store translates them in one
function (``translate_errors`` in ``store/postgres/errors.py`` and ``store/sqlite/errors.py``).
"""

from __future__ import annotations


class JobqError(Exception):
    """Base of every error jobq raises on purpose."""


class InvalidInput(JobqError, ValueError):
    """An argument was rejected before anything was written."""


class NotFound(JobqError, LookupError):
    """The thing asked for does not exist (or belongs to someone else)."""


class JobNotFound(NotFound):
    def __init__(self, job_id: object) -> None:
        super().__init__(f"job {job_id} not found")
        self.job_id = job_id


class TokenNotFound(NotFound):
    def __init__(self, token_id: object) -> None:
        super().__init__(f"API token {token_id} not found")
        self.token_id = token_id


class LimitNotFound(NotFound):
    def __init__(self, scope: str) -> None:
        super().__init__(f"no limit is set on {scope}")
        self.scope = scope


class ScheduleNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(f"no schedule is named {name!r}")
        self.name = name


class InvalidTransition(JobqError):
    """The job's current state does not allow the operation."""

    def __init__(self, message: str, state: str) -> None:
        super().__init__(message)
        self.state = state


class IdempotencyConflict(JobqError):
    """The same idempotency key was already used for a job with a different body."""


class LeaseLost(JobqError):
    """The fencing token no longer holds the job (it was reaped, reclaimed or cancelled)."""

    def __init__(self, job_id: object, attempt: int) -> None:
        super().__init__(f"lease lost on job {job_id} (attempt {attempt}); the write was discarded")
        self.job_id = job_id
        self.attempt = attempt


class LeadershipLost(JobqError):
    """The leadership token (owner, term) no longer holds an unexpired lease: a deposed
    leader's maintenance write, discarded whole."""

    def __init__(self, name: str, owner: str, term: int) -> None:
        super().__init__(f"{owner} no longer leads {name!r} (term {term}); the write was discarded")
        self.name = name
        self.owner = owner
        self.term = term


class StoreUnavailable(JobqError):
    """The database is unreachable or answered with a transient error."""


class SchemaMismatch(StoreUnavailable):
    """The database's schema is one this release cannot run on: ``direction`` says "behind" (run
    ``jobq migrate``) or "ahead" (a newer release migrated it, with revisions not marked compatible)."""

    def __init__(self, message: str, direction: str) -> None:
        super().__init__(message)
        self.direction = direction


class PermanentError(JobqError):
    """Raise from a handler to fail the job at once, without retries."""


class TooManyItemFailures(JobqError):
    """More items of a job failed than its kind's ``max_item_failures`` allows.

    Raised inside the handler when the item over the limit is recorded; the attempt fails as
    retryable (the next attempt runs the failed items again), and after the job's last attempt
    the job fails with this message: how many items failed, of how many, and the first errors.
    """

    def __init__(self, failed: int, total: int | None, limit: int | float, first_errors: list[str]) -> None:
        of = f" of {total}" if total is not None else ""
        allowed = f"{limit:g} of the items" if isinstance(limit, float) else f"{limit}"
        super().__init__(
            f"{failed}{of} items failed, more than max_item_failures allows ({allowed}); first errors: "
            + "; ".join(first_errors)
        )
        self.failed = failed
        self.total = total


class PayloadTooLarge(InvalidInput):
    """A request body or a job's payload is over its byte limit; nothing was written.

    (A batch of too many jobs is an ``InvalidInput``: the count is part of the API's schema.)"""


class ResultTooLarge(PayloadTooLarge):
    """A result (a job's or an item's) is over ``JOBQ_MAX_RESULT_BYTES``; nothing was written.

    The same handler returns the same result again, so the attempt fails without a retry."""


class Unauthorized(JobqError):
    """No valid API token: missing, unknown or revoked (the API does not say which)."""


class JobFailed(JobqError):
    """Raised by the client when the job it waited on ended ``failed``."""

    def __init__(self, job_id: object, error: str | None, status: object = None) -> None:
        super().__init__(f"job {job_id} failed: {error or 'no error recorded'}")
        self.job_id = job_id
        self.error = error
        self.status = status  # the client's Job, as last read


class JobCancelled(JobqError):
    """Raised by the client when the job it waited on ended ``cancelled``."""

    def __init__(self, job_id: object, status: object = None) -> None:
        super().__init__(f"job {job_id} was cancelled")
        self.job_id = job_id
        self.status = status
