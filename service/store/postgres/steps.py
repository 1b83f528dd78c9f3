"""An enqueue as a sequence of steps, written once and sent by a sync or an async connection.

The enqueue runs on three kinds of connection: the store's pooled ones, the caller's psycopg
``Connection`` (``Queue(..., connection=)``) and the caller's ``AsyncConnection``
(``AsyncQueue``). What it sends — which statements, in which order, what each answer decides —
is the same on all three, so it is written once, as a generator (:data:`Steps`): it yields a
step (:class:`Query`, :class:`QueryEach`, :class:`Copy`), is sent the step's rows back, and
returns the statuses. :func:`run` and :func:`run_async` are the only code that differs: the
driver calls, with and without ``await``, and nothing that decides anything.

A :class:`Plan` also says how its steps must be wrapped: ``atomic`` (several statements that
land together: a transaction of its own on an autocommit connection, a savepoint in the
caller's) and ``pipelined`` (sent without waiting for each answer where the steps allow).
On a caller's connection that is not autocommit and has no transaction open yet,
OPEN_TRANSACTION is sent first: psycopg's ``transaction()`` on such an idle connection would
open a transaction of its own and commit it at the block's end, so the jobs would outlive the
caller's rollback. Sent first, its implicit BEGIN opens the caller's transaction, and the
steps run inside it, committed or rolled back only by the caller.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import postgres
from psycopg.adapt import Dumper
from psycopg.pq import Format, TransactionStatus
from psycopg.rows import dict_row

from service.jobs import JobStatus
from service.store.sqlfiles import statements

OPEN_TRANSACTION = statements("postgres")["open_transaction"]

Row = dict[str, Any]


@dataclass(frozen=True)
class Query:
    """One statement that returns rows (every enqueue statement does, if only a summary row);
    its rows come back. Fetched at once: in a pipeline that is where the round trip ends."""

    sql: str
    params: Mapping[str, Any]


@dataclass(frozen=True)
class QueryEach:
    """One statement run once per parameter set, in one round trip; the first row of each
    (None where it found none) comes back, in order."""

    sql: str
    params: Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Copy:
    """``COPY ... FROM STDIN (FORMAT BINARY)`` of ``rows``, typed by ``types`` (a jsonb column
    takes JSON text already encoded: :class:`JsonbText`); nothing comes back. The rows may be a
    generator: they are made while the first ones are sent."""

    sql: str
    types: Sequence[str]
    rows: Iterable[Sequence[Any]]


Step = Query | QueryEach | Copy
Steps = Generator[Step, list[Any], list[JobStatus]]


@dataclass(frozen=True)
class Plan:
    """Steps, and how they are wrapped (see the module docstring)."""

    steps: Steps
    atomic: bool
    pipelined: bool = False


class JsonbText(Dumper):
    """A payload as a Copy sends it: JSON text already encoded and checked (dump_payloads), in
    jsonb's binary form (version 1, then the text); chosen by ``set_types`` for the jsonb column,
    where psycopg's own would encode the text again."""

    format = Format.BINARY
    oid = postgres.types["jsonb"].oid

    def dump(self, obj: str) -> bytes:
        return b"\x01" + obj.encode()


def _opens_callers_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    return not conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE


def run(conn: psycopg.Connection[Any], plan: Plan, *, caller: bool) -> list[JobStatus]:
    """The plan on a sync connection: the store's pooled one (autocommit), or the caller's."""
    with ExitStack() as stack:
        if caller and _opens_callers_transaction(conn):
            conn.execute(OPEN_TRANSACTION)
        if plan.pipelined:
            stack.enter_context(conn.pipeline())
        if plan.atomic:
            stack.enter_context(conn.transaction())
        return run_steps(stack.enter_context(conn.cursor(row_factory=dict_row)), plan.steps)


def run_steps(cursor: psycopg.Cursor[Row], steps: Steps) -> list[JobStatus]:
    """Steps in the transaction the cursor's connection has open (a completion that adds its
    handler's children runs them between its own statements)."""
    try:
        step = next(steps)
        while True:
            step = steps.send(_step(cursor, step))
    except StopIteration as done:
        answer: list[JobStatus] = done.value
        return answer


def _step(cursor: psycopg.Cursor[Row], step: Step) -> list[Any]:
    if isinstance(step, Query):
        cursor.execute(step.sql, step.params)
        return cursor.fetchall()
    if isinstance(step, QueryEach):
        if not step.params:
            return []
        cursor.executemany(step.sql, step.params, returning=True)
        first: list[Row | None] = []
        for _ in step.params:
            first.append(cursor.fetchone())
            cursor.nextset()
        return first
    cursor.adapters.register_dumper(None, JsonbText)
    with cursor.copy(step.sql) as copy:
        copy.set_types(list(step.types))
        write = copy.write_row
        for row in step.rows:
            write(row)
    return []


async def run_async(conn: psycopg.AsyncConnection[Any], plan: Plan) -> list[JobStatus]:
    """The plan on the caller's AsyncConnection (AsyncQueue): :func:`run`'s steps, awaited."""
    async with AsyncExitStack() as stack:
        if _opens_callers_transaction(conn):
            await conn.execute(OPEN_TRANSACTION)
        if plan.pipelined:
            await stack.enter_async_context(conn.pipeline())
        if plan.atomic:
            await stack.enter_async_context(conn.transaction())
        cursor = await stack.enter_async_context(conn.cursor(row_factory=dict_row))
        steps = plan.steps
        try:
            step = next(steps)
            while True:
                step = steps.send(await _step_async(cursor, step))
        except StopIteration as done:
            answer: list[JobStatus] = done.value
            return answer


async def _step_async(cursor: psycopg.AsyncCursor[Row], step: Step) -> list[Any]:
    if isinstance(step, Query):
        await cursor.execute(step.sql, step.params)
        return await cursor.fetchall()
    if isinstance(step, QueryEach):
        if not step.params:
            return []
        await cursor.executemany(step.sql, step.params, returning=True)
        first: list[Row | None] = []
        for _ in step.params:
            first.append(await cursor.fetchone())
            cursor.nextset()
        return first
    cursor.adapters.register_dumper(None, JsonbText)
    async with cursor.copy(step.sql) as copy:
        copy.set_types(list(step.types))
        for row in step.rows:
            await copy.write_row(row)
    return []
