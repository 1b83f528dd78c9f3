"""Replay: ``jobq replay`` and ``POST /v1/jobs/replay`` put failed jobs back, recorded, and
change nothing on a dry run or on bad input."""

from __future__ import annotations

import getpass
import uuid
from typing import Any

from service.jobs import JobState, NewJob
from service.store import Store
from tests.api.conftest import LiveApi
from tests.api.problems import assert_problem
from tests.cli.test_cli import EXIT_FAILED, EXIT_USAGE, assert_one_line_error
from tests.conftest import Database
from tests.ops.conftest import Run, backdate, cancel_job, fail_jobs

CLI_USER = f"cli:{getpass.getuser()}"


def states(db: Database) -> dict[str, str]:
    return {row["id"]: row["state"] for row in db.rows("SELECT id, state FROM jobs")}


def test_replay_by_kind_lists_on_a_dry_run_then_replays_and_records(cli: Run, live: Store, db: Database) -> None:
    quota = fail_jobs(live, "resize", ["QuotaExceeded: 429 after 3 s", "quotaexceeded: 429 after 9 s"])
    [disk] = fail_jobs(live, "resize", ["OSError: [Errno 28] No space left on device"])
    [ocr] = fail_jobs(live, "ocr", ["QuotaExceeded: 429"])
    cancelled = cancel_job(live, "resize")
    before = states(db)

    dry = cli("replay", "--kind", "resize", "--error-like", "QUOTA", "--dry-run")

    assert dry.returncode == 0, dry.stderr
    assert sorted(dry.stdout.split()) == sorted(str(job.id) for job in quota)
    assert "would replay 2 jobs" in dry.stderr and "nothing was changed" in dry.stderr
    assert states(db) == before and db.count("job_replays") == 0

    real = cli("replay", "--kind", "resize", "--error-like", "QUOTA")

    assert (real.returncode, real.stdout) == (0, "replayed 2 jobs\n"), real.stderr
    for job in quota:
        row = db.job(job.id)
        assert (row["state"], row["attempts"], row["error"]) == ("queued", 0, None)
    records = db.rows("SELECT * FROM job_replays ORDER BY job_id")
    assert [r["job_id"] for r in records] == sorted(str(job.id) for job in quota)
    assert {(r["replayed_by"], r["previous_state"], r["previous_attempts"]) for r in records} == {
        (CLI_USER, "failed", 1)
    }
    assert {r["previous_error"] for r in records} == {"QuotaExceeded: 429 after 3 s", "quotaexceeded: 429 after 9 s"}
    assert (db.job(disk.id)["state"], db.job(ocr.id)["state"]) == ("failed", "failed")

    # --since narrows by when the job ended; --include-cancelled takes cancelled jobs too.
    backdate(db, 2, "id = %(id)s", id=disk.id)
    assert cli("replay", "--kind", "resize", "--include-cancelled", "--since", "24h").stdout == "replayed 1 job\n"
    assert db.job(cancelled.id)["state"] == "queued" and db.job(disk.id)["state"] == "failed"
    assert cli("replay", "--kind", "resize").stdout == "replayed 1 job\n"
    assert db.job(disk.id)["state"] == "queued" and db.job(ocr.id)["state"] == "failed"
    assert db.count("job_replays") == 4


def test_replay_by_id_says_which_named_jobs_it_could_not_replay(cli: Run, live: Store, db: Database) -> None:
    [failed] = fail_jobs(live, "resize", ["boom"])
    cancelled = cancel_job(live, "resize")
    queued = live.enqueue(NewJob(kind="resize"))
    missing = uuid.uuid4()

    result = cli("replay", "--id", str(failed.id), "--id", str(cancelled.id), "--id", str(queued.id),
                 "--id", str(missing), "--id", str(failed.id))  # fmt: skip

    assert result.returncode == EXIT_FAILED
    assert result.stdout == "replayed 2 jobs\n"
    [line] = result.stderr.splitlines()
    assert line.startswith("error: 2 of 4 ids not replayed") and str(queued.id) in line and str(missing) in line
    assert (db.job(failed.id)["state"], db.job(cancelled.id)["state"]) == ("queued", "queued")
    assert live.get(queued.id).state is JobState.QUEUED and db.count("job_replays") == 2


def test_every_option_narrows_the_others(cli: Run, live: Store, db: Database) -> None:
    [resize] = fail_jobs(live, "resize", ["QuotaExceeded"])
    [ocr] = fail_jobs(live, "ocr", ["QuotaExceeded"])

    result = cli("replay", "--id", str(resize.id), "--id", str(ocr.id), "--kind", "ocr", "--error-like", "quota")

    assert (result.returncode, result.stdout) == (EXIT_FAILED, "replayed 1 job\n")
    assert str(resize.id) in result.stderr and "filtered out" in result.stderr
    assert (db.job(resize.id)["state"], db.job(ocr.id)["state"]) == ("failed", "queued")


def test_bad_replay_arguments_are_usage_errors_and_change_nothing(cli: Run, live: Store, db: Database) -> None:
    [job] = fail_jobs(live, "resize", ["boom"])
    bad = [
        [],
        ["--error-like", "boom"],
        ["--since", "1h", "--include-cancelled"],
        ["--id", "not-a-uuid"],
        ["--kind", "resize", "--error-like", ""],
        ["--kind", "resize", "--since", "0s"],
        ["--kind", "resize", "--since", "soon"],
    ]
    for args in bad:
        assert_one_line_error(cli("replay", *args), EXIT_USAGE)
    assert db.job(job.id)["state"] == "failed" and db.count("job_replays") == 0


# -- over HTTP --------------------------------------------------------------------------------


def test_the_api_replays_only_the_tenants_own_jobs_recorded_as_the_tenant(api: LiveApi, db: Database) -> None:
    acme = fail_jobs(api.store, "resize", ["QuotaExceeded: 1", "OSError: disk full"], tenant="acme")
    [other] = fail_jobs(api.store, "resize", ["QuotaExceeded: 2"], tenant="globex")
    http = api.http(api.token("acme"))

    dry = http.post("/v1/jobs/replay", json={"kind": "resize", "dry_run": True})
    assert dry.status_code == 200, dry.text
    assert dry.json()["dry_run"] is True and sorted(dry.json()["job_ids"]) == sorted(str(j.id) for j in acme)
    assert db.count("jobs", "state = 'failed'") == 3 and db.count("job_replays") == 0

    by_id = http.post("/v1/jobs/replay", json={"ids": [str(acme[0].id), str(other.id)]}).json()
    assert by_id == {"dry_run": False, "count": 1, "job_ids": [str(acme[0].id)]}
    assert db.job(other.id)["state"] == "failed"
    assert db.one("SELECT replayed_by FROM job_replays")["replayed_by"] == "api:acme"

    by_kind = http.post("/v1/jobs/replay", json={"kind": "resize", "error_like": "disk", "since": "1h"}).json()
    assert by_kind["job_ids"] == [str(acme[1].id)]
    assert db.count("jobs", "state = 'queued'") == 2 and db.job(other.id)["state"] == "failed"


BAD_BODIES: list[Any] = [
    {},
    {"kind": "resize", "state": "queued"},
    {"kind": "resize", "tenant": "globex"},
    {"ids": []},
    {"kind": None},
    {"kind": "resize", "since": None},
    {"error_like": "boom", "since": "1h"},
    {"ids": ["not-a-uuid"]},
    {"ids": [str(uuid.uuid4()) for _ in range(1_001)]},
    {"kind": "resize", "since": "0s"},
    {"kind": "resize", "since": "1 day"},
    {"kind": "resize", "dry_run": "yes"},
    {"kind": ""},
    {"kind": "resize", "error_like": "nul\u0000"},
    ["resize"],
]


def test_bad_replay_requests_are_problems_and_change_nothing(api: LiveApi, db: Database) -> None:
    [job] = fail_jobs(api.store, "resize", ["boom"], tenant="acme")
    http = api.http(api.token("acme"))
    for body in BAD_BODIES:
        assert_problem(http.post("/v1/jobs/replay", json=body), 422, "invalid-request")
    assert_problem(api.http().post("/v1/jobs/replay", json={"kind": "resize"}), 401, "unauthorized")
    assert_problem(http.get("/v1/jobs/replay"), 405)
    assert db.job(job.id)["state"] == "failed" and db.count("job_replays") == 0
