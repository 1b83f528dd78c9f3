"""Schedule rows read back as :class:`~service.schedules.Schedule`: one mapping for both stores
(each passes its own :class:`~service.store.rows.Readers`, as for every other row)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.payloads import dump_payloads
from service.schedules import CatchUp, Schedule, ScheduleSource, ScheduleSpec
from service.store.rows import Readers

DUE_SCHEDULES_BATCH = 100
"""Due schedules one scheduler pass reads at most; the rest are due at the next pass."""


def schedule_row(row: Mapping[str, Any], read: Readers) -> Schedule:
    payload = read.json(row["payload"])
    return Schedule(
        spec=ScheduleSpec(
            name=row["name"],
            cron=row["cron"],
            kind=row["kind"],
            payload=payload if isinstance(payload, dict) else {},
            queue=row["queue"],
            tenant=row["tenant"],
            timezone=row["timezone"],
            catch_up=CatchUp(row["catch_up"]),
            source=ScheduleSource(row["source"]),
        ),
        paused=bool(row["paused"]),
        next_run_at=read.time(row["next_run_at"]),
        last_run_at=None if row["last_run_at"] is None else read.time(row["last_run_at"]),
        last_job_id=None if row["last_job_id"] is None else read.ident(row["last_job_id"]),
        created_at=read.time(row["created_at"]),
        updated_at=read.time(row["updated_at"]),
    )


def schedule_params(spec: ScheduleSpec, max_payload_bytes: int) -> dict[str, Any]:
    """A spec's columns as statement parameters (the payload as JSON text, under the payload rules
    its jobs' enqueues apply: a schedule none of whose ticks could be enqueued is refused now)."""
    return {
        "name": spec.name,
        "cron": spec.cron,
        "timezone": spec.timezone,
        "kind": spec.kind,
        "payload": dump_payloads([spec.payload], max_payload_bytes)[0],
        "queue": spec.queue,
        "tenant": spec.tenant,
        "catch_up": spec.catch_up.value,
        "source": spec.source.value,
    }
