"""The rule "a retention keeps at least a day of history" has one home, service.maintenance.pruner:
the Pruner holds it, and `jobq prune` (which --force may override) and `jobq worker
--retention` (which nothing overrides; tests/ops/test_prune.py) say it in their own
option's words."""

from __future__ import annotations

import pytest

from service.errors import InvalidInput
from service.jobs import NewJob
from service.maintenance.pruner import Pruner, check_retention
from service.store import Store
from service.worker import App, Worker, WorkerConfig
from tests.cli.test_cli import EXIT_USAGE, assert_one_line_error
from tests.conftest import Database
from tests.ops.conftest import Run, backdate, succeed_jobs

DAY = 86_400
HOURS_2 = 2 * 3_600


def test_a_pruner_refuses_a_retention_under_a_day_unless_forced(live: Store, db: Database) -> None:
    with pytest.raises(InvalidInput, match="^a retention of 2h00m keeps less than a day of history"):
        Pruner(live, HOURS_2)
    assert Pruner(live, DAY).older_than_seconds == DAY

    succeed_jobs(live, "resize", 2)
    backdate(db, 0.5, "TRUE")  # twelve hours ago
    assert Pruner(live, HOURS_2, force=True).run_until_done() == 2


def test_no_force_makes_a_retention_of_nothing_acceptable(live: Store) -> None:
    for seconds in (0, -1, float("nan")):
        with pytest.raises(InvalidInput, match="must be more than 0 seconds"):
            Pruner(live, seconds, force=True)


def test_the_rule_names_the_option_and_its_remedy_when_a_command_checks_it() -> None:
    with pytest.raises(InvalidInput) as refused:
        check_retention(HOURS_2, name="--older-than 2h", remedy="add --force if you mean it")
    assert str(refused.value) == "--older-than 2h keeps less than a day of history; add --force if you mean it"
    assert check_retention(DAY) == DAY


def test_a_worker_built_with_a_retention_under_a_day_refuses_to_start(live: Store) -> None:
    with pytest.raises(InvalidInput, match="keeps less than a day of history"):
        Worker(live, App(), WorkerConfig(retention_seconds=HOURS_2))


def test_jobq_prune_says_the_rule_in_its_option_and_a_forced_dry_run_counts(
    cli: Run, live: Store, db: Database
) -> None:
    refused = cli("prune", "--older-than", "12h", "--dry-run")
    assert_one_line_error(refused, EXIT_USAGE)
    assert "--older-than 12h keeps less than a day of history; add --force if you mean it" in refused.stderr

    succeed_jobs(live, "resize", 1)
    live.enqueue(NewJob(kind="resize"))  # queued: never counted, however old
    backdate(db, 1, "TRUE")
    backdate(db, 1, "TRUE", column="created_at")
    forced = cli("prune", "--older-than", "12h", "--dry-run", "--force")
    assert forced.stdout == "would delete 1 job finished more than 12h ago (dry run; nothing was deleted)\n"
