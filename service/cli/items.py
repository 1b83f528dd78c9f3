"""A job's item outcomes from the command line: ``jobq items JOB_ID [--failed] [--json]``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from service.cli.app import app, open_cli_store, parse_job_id
from service.jobs import MAX_PAGE_SIZE, ItemQuery, ItemState, JobItem
from service.status import ItemOut
from service.store import Store


def item_fields(item: JobItem) -> dict[str, Any]:
    """An item exactly as ``GET /v1/jobs/{id}/items`` shows it (one mapping, not two)."""
    return ItemOut.of(item).model_dump(mode="json")


def every_item(store: Store, query: ItemQuery) -> Iterator[JobItem]:
    """Page after page, in item order."""
    while True:
        page = store.list_items(query)
        yield from page.items
        if page.next_after_index is None:
            return
        query = ItemQuery(job_id=query.job_id, state=query.state, after_index=page.next_after_index, limit=query.limit)


@app.command()
def items(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID", help="The job whose item outcomes to show.")],
    failed: Annotated[bool, typer.Option("--failed", help="Only the failed items, with their errors.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line, the REST API's fields.")] = False,
) -> None:
    """A job's item outcomes so far, in item order (while it runs, too): ok with results, failed with errors."""
    query = ItemQuery(job_id=parse_job_id(job_id), state=ItemState.FAILED if failed else None, limit=MAX_PAGE_SIZE)
    shown = 0
    with open_cli_store(ctx) as store:
        for item in every_item(store, query):
            shown += 1
            fields = item_fields(item)
            if as_json:
                print(json.dumps(fields))
            elif item.state is ItemState.FAILED:
                print(f"{item.index:>6}  failed  attempt {item.attempt}  {(item.error or '').splitlines()[0]}")
            else:
                print(f"{item.index:>6}  ok      attempt {item.attempt}  {json.dumps(item.result)}")
    if not shown:
        print(f"jobq: job {job_id} has no {'failed ' if failed else ''}item outcomes yet", file=sys.stderr)
