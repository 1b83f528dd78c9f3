"""Settings: one typed object, read from ``JOBQ_*`` environment variables.

There is no module-level instance: call :func:`load_settings` where a process
starts and pass the result down, so tests build their own.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.payloads import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_MAX_RESULT_BYTES,
    MAX_LEASE_SECONDS,
    SUBMIT_ENVELOPE_BYTES,
)

DEFAULT_DATABASE_URL = "sqlite:///./jobq.db"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBQ_", extra="ignore")

    database_url: str = Field(
        default=DEFAULT_DATABASE_URL,
        description="postgresql://… for a fleet, sqlite:///path for one host.",
    )
    notify: bool = Field(
        default=True,
        description="Send LISTEN/NOTIFY wake-ups on PostgreSQL. Turn off behind "
        "PgBouncer in transaction mode; workers then rely on polling alone.",
    )
    prepare: Literal["on", "off", "auto"] = Field(
        default="auto",
        description="Named prepared statements on PostgreSQL. `off` behind a transaction pooler that "
        "does not keep them (PgBouncer before 1.21, or max_prepared_statements = 0); `auto` prepares "
        "until such a pooler's first error, then stops and says so once; `on` always.",
    )
    pool_size: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Database connections per process (PostgreSQL) for statements, besides a worker's "
        "listener: every thread takes one for one statement at a time. One serves a worker at any "
        "--concurrency; raise it for a program that enqueues from many threads at once.",
    )
    lease_seconds: float = Field(default=60.0, gt=0, le=MAX_LEASE_SECONDS)
    retry_base_seconds: float = Field(default=2.0, ge=0)
    retry_cap_seconds: float = Field(default=600.0, ge=0)
    max_result_bytes: int = Field(
        default=DEFAULT_MAX_RESULT_BYTES,
        ge=1_024,
        description="Largest result (a job's, or one item's) as JSON, in bytes. A worker whose handler "
        "returns more fails the attempt for good; keep large artefacts in object storage and return "
        "a reference. The API streams a result, so reading one does not hold it in memory.",
    )
    # -- the REST API (jobq serve) ---------------------------------------------------
    auth: bool = Field(
        default=True,
        description="Require a bearer token on every /v1 request. JOBQ_AUTH=off serves "
        "everything as one default tenant (jobq dev, local use); the server warns at start.",
    )
    max_body_bytes: int = Field(
        default=DEFAULT_MAX_PAYLOAD_BYTES,
        ge=1_024,
        description="Largest job payload (compact JSON) and request body, in bytes; 413 above. Every way "
        f"in refuses a larger payload alike; a single submit's body may hold {SUBMIT_ENVELOPE_BYTES // 1024} "
        "KiB more, for the job's other fields.",
    )
    max_batch_body_bytes: int = Field(
        default=16_777_216, ge=1_024, description="Largest body of POST /v1/jobs/batch in bytes; 413 above."
    )
    api_pool_size: int = Field(
        default=4,
        ge=1,
        le=64,
        description="Database connections per API process (PostgreSQL), plus one for long-poll wake-ups.",
    )


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, with explicit overrides winning."""
    return Settings(**overrides)  # type: ignore[arg-type]
