"""The dead-letter view: ``jobq failures`` and ``GET /v1/failures``, one bug one group."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from service.store import Store
from service.store.postgres.queries import FAILURE_GROUPS
from tests.api.conftest import LiveApi
from tests.api.problems import assert_problem
from tests.cli.test_cli import EXIT_USAGE, assert_one_line_error
from tests.conftest import Database
from tests.ops.conftest import Run, backdate, fail_jobs, succeed_jobs, traceback
from tests.plans import explained

# One bug, four jobs: ids, numbers and addresses differ, the exception line does not.
PARSE_ERRORS = [
    traceback("ValueError: row 0190d9f2-1c4e-7a3b-9f00-3b1d2c4e5f60 has 17 columns, expected 12 (buffer at 0x7f3a9c)"),
    traceback("ValueError: row 0190d9f2-1c4e-7a3b-9f00-aaaaaaaaaaaa has 3 columns, expected 12 (buffer at 0x55d0)"),
    traceback("ValueError: row 0190d9f3-0000-7000-8000-000000000001 has 170 columns, expected 12 (buffer at 0x1)"),
    traceback("ValueError: row 0190d9f3-0000-7000-8000-000000000002 has 0 columns, expected 12 (buffer at 0xabc)"),
]
PARSE_GROUP = "ValueError: row <id> has N columns, expected N (buffer at <addr>)"
QUOTA_ERRORS = ["QuotaExceeded: 429 after 3.5 s", "QuotaExceeded: 429 after 12 s"]


def seed(store: Store) -> None:
    fail_jobs(store, "resize", PARSE_ERRORS)
    fail_jobs(store, "resize", QUOTA_ERRORS)
    fail_jobs(store, "ocr", [traceback("KeyError: 'page_7'")])
    succeed_jobs(store, "resize", 3)


def test_failures_groups_one_bug_into_one_line_biggest_first(cli: Run, live: Store) -> None:
    seed(live)

    result = cli("failures", "--json")

    assert result.returncode == 0, result.stderr
    groups = json.loads(result.stdout)["groups"]
    assert [(g["kind"], g["error_group"], g["count"]) for g in groups] == [
        ("resize", PARSE_GROUP, 4),
        ("resize", "QuotaExceeded: N after N s", 2),
        ("ocr", "KeyError: 'page_N'", 1),
    ]
    assert all(g["first_seen"] <= g["last_seen"] for g in groups)

    table = cli("failures", "--kind", "resize")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:2] == ["COUNT", "KIND"] and len(lines) == 3, table.stdout
    assert re.match(r"\s*4\s+resize\s", lines[1]) and lines[1].endswith(PARSE_GROUP), table.stdout


def test_the_window_leaves_older_failures_out(cli: Run, live: Store, db: Database) -> None:
    seed(live)
    backdate(db, 2, "kind = %(kind)s", kind="ocr")

    recent = json.loads(cli("failures", "--json", "--since", "24h").stdout)["groups"]
    wider = json.loads(cli("failures", "--json", "--since", "3d").stdout)["groups"]

    assert {g["kind"] for g in recent} == {"resize"}
    assert {g["kind"] for g in wider} == {"resize", "ocr"}


def test_nothing_failed_is_an_empty_answer(cli: Run) -> None:
    result = cli("failures")
    assert (result.returncode, result.stdout) == (0, "")
    assert "no failed jobs since" in result.stderr
    assert json.loads(cli("failures", "--json").stdout)["groups"] == []


def test_a_bad_window_is_a_usage_error(cli: Run) -> None:
    for since in ["0s", "24", "1h30m", "yesterday"]:
        assert_one_line_error(cli("failures", "--since", since), EXIT_USAGE)


def test_the_api_shows_only_the_tenants_own_failures(api: LiveApi) -> None:
    fail_jobs(api.store, "resize", PARSE_ERRORS[:3], tenant="acme")
    fail_jobs(api.store, "resize", PARSE_ERRORS[3:], tenant="globex")
    fail_jobs(api.store, "ocr", ["KeyError: 'x'"], tenant="globex")
    acme = api.http(api.token("acme"))

    response = acme.get("/v1/failures", params={"since": "1h"})

    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    [group] = body["groups"]
    assert (group["kind"], group["error_group"], group["count"]) == ("resize", PARSE_GROUP, 3)
    assert group["example_job_url"] == f"/v1/jobs/{group['example_job_id']}"
    assert acme.get(group["example_job_url"]).json()["state"] == "failed"
    assert [g["count"] for g in acme.get("/v1/failures", params={"kind": "ocr"}).json()["groups"]] == []

    globex = api.http(api.token("globex")).get("/v1/failures").json()["groups"]
    assert sorted((g["kind"], g["count"]) for g in globex) == [("ocr", 1), ("resize", 1)]


def test_the_api_refuses_bad_windows_unknown_parameters_and_missing_tokens(api: LiveApi) -> None:
    http = api.http(api.token("acme"))
    assert_problem(http.get("/v1/failures", params={"since": "0s"}), 422, "invalid-request")
    assert_problem(http.get("/v1/failures", params={"since": "forever"}), 422, "invalid-request")
    assert_problem(http.get("/v1/failures", params={"sinse": "1h"}), 422, "invalid-request")
    assert_problem(api.http().get("/v1/failures"), 401, "unauthorized")


@pytest.mark.postgres_only(reason="asserts PostgreSQL's query plan")
def test_the_failures_query_reads_a_window_of_the_finished_at_index(db: Database) -> None:
    # Six weeks of history, one job every 130 seconds, one in five failed.
    db.execute(
        """
        INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts,
                          error, error_group, run_after, created_at, updated_at, started_at, finished_at)
        SELECT gen_random_uuid(), 't' || (g % 50), 'default', 'k' || (g % 8), '{}'::jsonb,
               (ARRAY['succeeded', 'succeeded', 'succeeded', 'failed', 'cancelled'])[1 + g % 5],
               0, 1, 3,
               CASE WHEN g % 5 = 3 THEN 'ValueError: ' || g END,
               CASE WHEN g % 5 = 3 THEN 'ValueError: N' END,
               ts, ts, ts, ts, ts
        FROM generate_series(1, 30000) AS g,
             LATERAL (SELECT now() - make_interval(secs => g * 130) AS ts) AS t
        """
    )
    db.execute("ANALYZE jobs")

    for kind, tenant in [(None, None), ("k3", None), (None, "t3")]:
        [row] = db.rows(
            "EXPLAIN (FORMAT JSON) " + FAILURE_GROUPS,
            since=db.scalar("SELECT now() - interval '24 hours'"),
            kind=kind,
            tenant=tenant,
        )
        shown = json.dumps(explained(row))
        # either window on finished_at: all jobs' or the failed jobs' (ix_jobs_failed_finished_at, issue 17)
        assert re.search(r'"Index Name": "ix_jobs_(failed_)?finished_at"', shown), (
            f"kind={kind} tenant={tenant}:\n{shown}"
        )
        assert '"Seq Scan"' not in shown, f"kind={kind} tenant={tenant}: scans six weeks of history\n{shown}"
