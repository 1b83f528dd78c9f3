"""``jobq explain JOB_ID``: why a job is (not) running, from the database as it is now."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any

import typer

from service.cli.app import JobIdArgument, app, open_cli_store, parse_job_id
from service.explain import Explanation, explain
from service.jobs import WORKER_ALIVE_SECONDS


@app.command("explain")
def explain_command(
    ctx: typer.Context,
    job_id: JobIdArgument,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object: the summary and every reason.")] = False,
) -> None:
    """Say why a job is not running (or how it runs, or how it ended), in words and in fields."""
    parsed = parse_job_id(job_id)
    with open_cli_store(ctx) as store:
        explanation = explain(store.explain_facts(parsed, workers_seen_within=WORKER_ALIVE_SECONDS))
    if as_json:
        print(json.dumps(explanation_fields(explanation), indent=2))
        return
    print(f"{explanation.state.value}: {explanation.summary}")
    for reason in explanation.reasons[1:]:
        print(f"  also: {reason.message}")


def explanation_fields(explanation: Explanation) -> dict[str, Any]:
    """The explanation as the REST API shows it (``GET /v1/jobs/{id}/explain``)."""
    return {
        "job_id": str(explanation.job_id),
        "state": explanation.state.value,
        "summary": explanation.summary,
        "reasons": [dataclasses.asdict(reason) for reason in explanation.reasons],
    }
