"""Request and response bodies of the v1 API.

Request models forbid unknown fields and are strict about types (``"5"`` is not
an integer, ``true`` is not a number), so a client cannot set state, attempts
or tenant, and a typo is a 422 rather than a silently ignored field. Bounds
and text rules come from the domain (:mod:`service.payloads`): the models publish
the bounds in the schema and call the domain's checks, so the API and the store
agree (the checks raise InvalidInput, a ValueError, which pydantic turns into a 422).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationInfo,
    field_validator,
)

from service.jobs import NewJob
from service.payloads import (
    IDEMPOTENCY_KEY_PATTERN,
    MAX_ATTEMPTS_LIMIT,
    MAX_DELAY_SECONDS,
    MAX_KEY_LENGTH,
    MAX_NAME_LENGTH,
    MAX_PRIORITY,
    MAX_TOTAL,
    check_idempotency_key,
    storable_json,
    storable_text,
)
from service.status import ItemOut, JobOut
from service.workflows import MAX_PARENTS

MAX_BATCH_JOBS = 1_000
# "Holds a character that is not blank", for names: blank as service.jobs.validate_new_job sees
# it (str.strip, str.isspace). Spelled out because the three regex engines that read this
# pattern disagree on \s: JSON Schema's (ECMA-262, what clients and schemathesis go by) counts
# U+FEFF but not U+001C-U+001F or U+0085; pydantic's (Rust) counts U+0085 only; Python counts
# those five and not U+FEFF. A class of explicit \t \xHH \uHHHH escapes means the same in all three.
NOT_BLANK = r"[^\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"


def storable_field(value: str, info: ValidationInfo) -> str:
    """The domain's text rule, naming the field it refuses."""
    return storable_text(value, info.field_name or "text")


def whole_number(value: Any) -> Any:
    """JSON Schema's integer includes 3.0; strings and booleans stay wrong (strict mode)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Int = Annotated[int, BeforeValidator(whole_number)]
Name = Annotated[
    str, Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=NOT_BLANK), AfterValidator(storable_field)
]
Key = Annotated[str, Field(min_length=1, max_length=MAX_KEY_LENGTH), AfterValidator(storable_field)]


def idempotency_key_field(value: str, info: ValidationInfo) -> str:
    """The domain's key rule (service.payloads.check_idempotency_key), naming the field."""
    return check_idempotency_key(value, info.field_name or "idempotency_key")


IdempotencyKeyText = Annotated[
    str,
    Field(min_length=1, max_length=MAX_KEY_LENGTH, json_schema_extra={"pattern": IDEMPOTENCY_KEY_PATTERN}),
    AfterValidator(idempotency_key_field),
]
"""An idempotency key as the batch's body and the Idempotency-Key header take it: one rule."""


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


ParentId = Annotated[uuid.UUID, Field(strict=False)]  # a job id as JSON text (strict models take no str)


class BatchPosition(_Request):
    """A parent named by its place in the same batch (0 is the batch's first job)."""

    index: Annotated[int, Field(ge=0, lt=MAX_BATCH_JOBS), BeforeValidator(whole_number)]


class JobSubmit(_Request):
    """A job to run: which handler (``kind``) and its input (``payload``)."""

    kind: Name = Field(description="Which handler runs the job.", examples=["classify"])
    payload: dict[str, Any] = Field(
        default_factory=dict,
        description="The handler's input, a JSON object (at most JOBQ_MAX_BODY_BYTES). Its strings "
        "must be storable text: no NUL character (\\u0000), no lone surrogate.",
        examples=[{"text": "the parcel arrived broken"}],
    )
    queue: Name = Field(default="default", description="Workers claim from the queues they serve.")
    priority: Int = Field(default=0, ge=0, le=MAX_PRIORITY, description="Higher runs first.")
    max_attempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS_LIMIT), BeforeValidator(whole_number)] | None = Field(
        default=None,
        description="Attempts before the job fails for good; default: the kind's handler's max_attempts, "
        "else 3. The handler's max_attempts also caps it.",
    )
    delay_seconds: float = Field(
        default=0.0, ge=0, le=MAX_DELAY_SECONDS, allow_inf_nan=False, description="Run no sooner than this."
    )
    total: Annotated[int, Field(ge=0, le=MAX_TOTAL), BeforeValidator(whole_number)] | None = Field(
        default=None, description="Items the job will do, if known (for progress)."
    )
    concurrency_key: Key | None = Field(
        default=None,
        description="The job's key scope, key:NAME. With a limit set on it (`jobq limits set key:NAME "
        "--concurrency N`), at most N jobs with this key run at once across the whole fleet; "
        "without one, the key only groups jobs (and `jobq explain` names it).",
    )

    depends_on: list[ParentId] = Field(
        default_factory=list,
        max_length=MAX_PARENTS,
        description="Workflows: parent jobs (ids of your jobs). The job stays queued, and is not claimed, "
        "until every parent succeeded; a parent that fails or is cancelled cancels it (see "
        "on_parent_failure). An unknown id, or another tenant's job, is a 404 and nothing is stored.",
    )
    on_parent_failure: Literal["cancel", "run"] = Field(
        default="cancel",
        description="'cancel': a failed or cancelled parent cancels this job (its error names the parent); "
        "'run': it runs anyway once every parent has ended.",
    )

    @field_validator("payload")
    @classmethod
    def _storable_payload(cls, payload: dict[str, Any]) -> dict[str, Any]:
        return storable_json(payload, "payload")  # type: ignore[no-any-return]

    def parents(self) -> tuple[uuid.UUID | int, ...]:
        return tuple(self.depends_on)

    def to_new_job(self, tenant: str, idempotency_key: str | None) -> NewJob:
        return NewJob(
            kind=self.kind,
            payload=self.payload,
            queue=self.queue,
            priority=self.priority,
            max_attempts=self.max_attempts,
            delay_seconds=self.delay_seconds,
            total=self.total,
            tenant=tenant,
            concurrency_key=self.concurrency_key,
            idempotency_key=idempotency_key,
            depends_on=self.parents(),
            on_parent_failure=self.on_parent_failure,
        )


class BatchJob(JobSubmit):
    """A job of a batch: as a single submit, with its Idempotency-Key in the body."""

    depends_on: list[ParentId | BatchPosition] = Field(  # type: ignore[assignment]
        default_factory=list,
        max_length=MAX_PARENTS,
        description='Workflows: parent jobs, each the id of one of your jobs or {"index": N}, the Nth '
        "job of this batch (0 is the first), which must come before this one: so a whole graph is one "
        "request, all or none, and a cycle cannot be written. The job is not claimed until every parent "
        "succeeded.",
    )

    def parents(self) -> tuple[uuid.UUID | int, ...]:
        return tuple(p.index if isinstance(p, BatchPosition) else p for p in self.depends_on)

    idempotency_key: IdempotencyKeyText | None = Field(
        default=None,
        description="Submit at most once per key (per tenant), as the Idempotency-Key header of a single "
        "submit: a key already used for the same job answers that job; for another job, a 409.",
    )


class BatchSubmit(_Request):
    jobs: list[BatchJob] = Field(
        # One rule, validated and published (maxItems) by the same Field: more jobs is a 422 like
        # any other schema violation. 413 is for bytes (the body caps), which a schema cannot state.
        min_length=1,
        max_length=MAX_BATCH_JOBS,
        description=f"Up to {MAX_BATCH_JOBS} jobs, stored in one round trip, all or none (more is a 422). "
        "A job with an idempotency_key is stored at most once: retrying a batch whose jobs all carry "
        "keys never duplicates one.",
    )


JOB_OUT = TypeAdapter(JobOut)
"""A JobOut's JSON as FastAPI writes a ``response_model=JobOut`` answer: the fast paths
answer with it, byte for byte the routes' (tests/bench/test_status_fast_path.py, tests/api/test_fast_submit.py)."""


class BatchOut(BaseModel):
    jobs: list[JobOut] = Field(description="One status per submitted job, in the order given.")


class JobPageOut(BaseModel):
    items: list[JobOut] = Field(description="Newest first.")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; none on the last page.")


class ItemPageOut(BaseModel):
    job_id: uuid.UUID
    items: list[ItemOut] = Field(description="In item order.")
    next_cursor: str | None = Field(
        description="Pass as ?cursor= for the next page; none on the last page so far (a running job may add more)."
    )


class JobResultOut(BaseModel):
    job_id: uuid.UUID
    result: Any = Field(description="What the handler returned, as stored.")


class HealthOut(BaseModel):
    status: str = Field(examples=["ok"])
