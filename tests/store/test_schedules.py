"""Periodic schedules on both stores: the store's operations (conformance), then the
scheduler's passes over them with a pinned clock (service/maintenance/scheduler.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from service.errors import ScheduleNotFound
from service.maintenance.scheduler import IDLE_SECONDS, MARGIN_SECONDS, Scheduler, SchedulerResult
from service.schedules import CatchUp, ScheduleSource, ScheduleSpec, next_tick, tick_key
from service.store import Store
from tests.conftest import Database, FakeClock

START = FakeClock.START  # 2030-01-01 12:00:00 UTC


def every_second(name: str = "beat", **fields: object) -> ScheduleSpec:
    return ScheduleSpec(name=name, cron="* * * * * *", kind="tick", payload={"from": name}, **fields)  # type: ignore[arg-type]


def add(store: Store, spec: ScheduleSpec) -> None:
    store.save_schedule(spec, next_tick(spec.cron, spec.timezone, store.database_now()))


def scheduled_jobs(db: Database, name: str = "beat") -> list[str]:
    rows = db.rows(
        "SELECT idempotency_key FROM jobs WHERE idempotency_key LIKE %(prefix)s ORDER BY idempotency_key",
        prefix=f"schedule:{name}:%",
    )
    return [row["idempotency_key"] for row in rows]


# -- the store's operations --------------------------------------------------------------


def test_a_saved_schedule_reads_back_with_its_next_run(store, clock: FakeClock):
    spec = ScheduleSpec(
        name="digest",
        cron="*/5 * * * *",
        kind="send_digest",
        payload={"list": "weekly", "n": [1, 2]},
        queue="mail",
        tenant="acme",
        timezone="Europe/Berlin",
        catch_up=CatchUp.SKIP,
    )
    saved = store.save_schedule(spec, START + timedelta(minutes=5))

    [listed] = store.list_schedules()
    assert listed == saved
    assert listed.spec == spec
    assert listed.next_run_at == START + timedelta(minutes=5)
    assert (listed.paused, listed.last_run_at, listed.last_job_id) == (False, None, None)
    assert listed.created_at == START


def test_redefining_a_schedule_keeps_its_next_run_unless_the_cron_changes(store, clock: FakeClock):
    store.save_schedule(every_second(), START + timedelta(seconds=1))
    store.set_schedule_paused("beat", True)

    again = store.save_schedule(every_second(queue="other"), START + timedelta(seconds=9))
    assert (again.next_run_at, again.paused, again.spec.queue) == (START + timedelta(seconds=1), True, "other")

    changed = store.save_schedule(
        ScheduleSpec(name="beat", cron="*/2 * * * * *", kind="tick"), START + timedelta(seconds=2)
    )
    assert changed.next_run_at == START + timedelta(seconds=2)


def test_due_schedules_are_the_unpaused_ones_due_by_the_database_clock(store, clock: FakeClock):
    store.save_schedule(every_second("due"), START)
    store.save_schedule(every_second("later"), START + timedelta(seconds=1))
    store.save_schedule(every_second("paused"), START - timedelta(seconds=1))
    store.set_schedule_paused("paused", True)

    now, due, following = store.due_schedules()

    assert now == START
    assert [s.name for s in due] == ["due"]
    assert following == START + timedelta(seconds=1)  # "later": when the scheduler looks again
    clock.advance(1)
    assert [s.name for s in store.due_schedules()[1]] == ["due", "later"]
    assert store.due_schedules()[2] is None  # none waits: the check-in says when one is due


def test_advancing_a_schedule_is_a_compare_and_set(store, clock: FakeClock):
    store.save_schedule(every_second(), START)
    nxt = START + timedelta(seconds=1)

    assert store.advance_schedule("beat", START, nxt, tick=START) is True
    assert store.advance_schedule("beat", START, nxt + timedelta(seconds=1), tick=START) is False
    [schedule] = store.list_schedules()
    assert (schedule.next_run_at, schedule.last_run_at) == (nxt, START)


def test_pause_resume_and_delete_name_a_schedule_or_raise(store, clock: FakeClock):
    store.save_schedule(every_second(), START)
    assert store.set_schedule_paused("beat", True).paused is True
    resumed = store.set_schedule_paused("beat", False, START + timedelta(hours=1))
    assert (resumed.paused, resumed.next_run_at) == (False, START + timedelta(hours=1))
    store.delete_schedule("beat")
    assert store.list_schedules() == []
    for operation in (lambda: store.delete_schedule("beat"), lambda: store.set_schedule_paused("beat", True)):
        with pytest.raises(ScheduleNotFound, match="beat"):
            operation()


# -- the scheduler, with a pinned clock ----------------------------------------------------


def test_each_tick_enqueues_one_job_keyed_by_the_tick(store, db: Database, clock: FakeClock):
    add(store, every_second())
    scheduler = Scheduler(store)

    assert scheduler.run_once() == SchedulerResult()  # nothing due yet
    for _ in range(3):
        clock.advance(1)
        assert scheduler.run_once() == SchedulerResult(fired=1)
        assert scheduler.run_once() == SchedulerResult()  # the same instant again: nothing

    assert scheduled_jobs(db) == [tick_key("beat", START + timedelta(seconds=s)) for s in (1, 2, 3)]
    job = db.one("SELECT kind, payload, queue, tenant FROM jobs WHERE idempotency_key = %(k)s", k=scheduled_jobs(db)[0])
    assert job == {"kind": "tick", "payload": {"from": "beat"}, "queue": "default", "tenant": "default"}
    [schedule] = store.list_schedules()
    assert schedule.last_run_at == START + timedelta(seconds=3)
    assert str(schedule.last_job_id) == db.scalar(
        "SELECT id FROM jobs WHERE idempotency_key = %(k)s", k=scheduled_jobs(db)[-1]
    )


def test_many_schedulers_at_once_enqueue_one_job_per_tick(make_store, store_url, db: Database, clock: FakeClock):
    stores = [make_store(store_url, clock=clock) for _ in range(4)]
    add(stores[0], every_second())
    schedulers = [Scheduler(s) for s in stores]

    for _ in range(5):
        clock.advance(1)
        with ThreadPoolExecutor(len(schedulers)) as pool:
            results = list(pool.map(lambda s: s.run_once(), schedulers))
        assert sum(r.fired for r in results) == 1, results

    assert len(scheduled_jobs(db)) == 5
    assert db.count("jobs") == 5


def test_a_five_second_outage_yields_one_catch_up_job_not_five(store, db: Database, clock: FakeClock):
    add(store, every_second())
    scheduler = Scheduler(store)
    clock.advance(1)
    scheduler.run_once()

    clock.advance(5.3)  # no worker ran for 5 s: the ticks at +2 .. +6 s were not fired
    assert scheduler.run_once() == SchedulerResult(fired=1)

    assert scheduled_jobs(db) == [tick_key("beat", START + timedelta(seconds=s)) for s in (1, 6)]
    assert store.list_schedules()[0].next_run_at == START + timedelta(seconds=7)


def test_catch_up_skip_drops_a_tick_missed_by_more_than_the_on_time_window(store, db: Database, clock: FakeClock):
    add(store, ScheduleSpec(name="hourly", cron="0 * * * *", kind="tick", catch_up=CatchUp.SKIP))
    clock.set(START + timedelta(hours=3, minutes=20))  # three hourly ticks missed

    assert Scheduler(store).run_once() == SchedulerResult(skipped=1)

    assert scheduled_jobs(db, "hourly") == []
    assert store.list_schedules()[0].next_run_at == START + timedelta(hours=4)


def test_catch_up_one_fires_the_latest_missed_tick_of_an_hourly_schedule(store, db: Database, clock: FakeClock):
    add(store, ScheduleSpec(name="hourly", cron="0 * * * *", kind="tick"))
    clock.set(START + timedelta(hours=3, minutes=20))

    assert Scheduler(store).run_once() == SchedulerResult(fired=1)

    assert scheduled_jobs(db, "hourly") == [tick_key("hourly", START + timedelta(hours=3))]


def test_a_paused_schedule_does_not_fire(store, db: Database, clock: FakeClock):
    add(store, every_second())
    store.set_schedule_paused("beat", True)
    clock.advance(3)

    assert Scheduler(store).run_once() == SchedulerResult()
    assert scheduled_jobs(db) == []


def test_declared_schedules_are_written_once_and_keep_an_operators_pause(store, db: Database, clock: FakeClock):
    declared = ScheduleSpec(name="beat", cron="* * * * * *", kind="tick", source=ScheduleSource.CODE)
    Scheduler(store, [declared]).run_once()
    store.set_schedule_paused("beat", True)
    clock.advance(2)

    assert Scheduler(store, [declared]).run_once() == SchedulerResult()  # a worker restarting

    [schedule] = store.list_schedules()
    assert (schedule.paused, schedule.spec.source, schedule.next_run_at) == (
        True,
        ScheduleSource.CODE,
        START + timedelta(seconds=1),
    )


@pytest.mark.parametrize(
    ("start", "ticks_utc"),
    [
        # Spring forward, 2030-03-31: 02:00 CET becomes 03:00 CEST, so 02:30 does not exist that
        # day: the job runs once, right after the jump (03:00 CEST = 01:00 UTC), as Debian's cron does.
        (
            datetime(2030, 3, 30, 12, tzinfo=UTC),
            [datetime(2030, 3, 31, 1, 0, tzinfo=UTC), datetime(2030, 4, 1, 0, 30, tzinfo=UTC)],
        ),
        # Fall back, 2030-10-27: 02:30 happens twice (CEST, then CET); the job runs once, at the first.
        (
            datetime(2030, 10, 26, 12, tzinfo=UTC),
            [datetime(2030, 10, 27, 0, 30, tzinfo=UTC), datetime(2030, 10, 28, 1, 30, tzinfo=UTC)],
        ),
    ],
    ids=["spring-forward", "fall-back"],
)
def test_a_local_time_schedule_across_a_dst_change_fires_once_a_day(
    make_store, store_url, db: Database, start: datetime, ticks_utc: list[datetime]
):
    clock = FakeClock(start)
    store = make_store(store_url, clock=clock)
    add(store, ScheduleSpec(name="nightly", cron="30 2 * * *", kind="tick", timezone="Europe/Berlin"))
    scheduler = Scheduler(store)

    for _ in range(2 * 24 * 4):  # two days, a pass every 15 minutes
        clock.advance(15 * 60)
        scheduler.run_once()

    assert scheduled_jobs(db, "nightly") == [tick_key("nightly", tick) for tick in ticks_utc]


def test_a_schedule_that_cannot_fire_here_does_not_hold_back_the_others(store, db: Database, clock: FakeClock):
    add(store, every_second("beat"))
    store.save_schedule(every_second("elsewhere"), START)
    db.execute("UPDATE schedules SET timezone = 'Nowhere/Land' WHERE name = 'elsewhere'")  # another host's tzdata
    clock.advance(1)

    assert Scheduler(store).run_once() == SchedulerResult(fired=1)

    assert scheduled_jobs(db) == [tick_key("beat", START + timedelta(seconds=1))]
    assert store.list_schedules()[1].next_run_at == START, "left due, for a worker that can fire it"


def test_the_scheduler_is_due_again_when_the_next_schedule_is_and_a_check_in_brings_it_forward(store, clock: FakeClock):
    """Issue 24: the leader reads the schedules when one is due, not twice a second."""
    mono = [1000.0]
    scheduler = Scheduler(store, monotonic=lambda: mono[0])
    assert scheduler.due_at() < mono[0]  # the first pass: at once
    scheduler.run_once()
    assert scheduler.due_at() == pytest.approx(mono[0] + IDLE_SECONDS)  # nothing to fire: the safety net
    scheduler.expect(None)  # a check-in: no schedule
    assert scheduler.due_at() == pytest.approx(mono[0] + IDLE_SECONDS)

    add(store, every_second())  # e.g. `jobq schedule add`: the next check-in tells
    scheduler.expect(1.0)
    assert scheduler.due_at() == pytest.approx(mono[0] + 1.0 + MARGIN_SECONDS)
    clock.advance(1)
    mono[0] += 1
    assert scheduler.run_once() == SchedulerResult(fired=1)
    assert scheduler.due_at() == pytest.approx(mono[0] + 1.0 + MARGIN_SECONDS)  # the next tick, a second on
    store.save_schedule(every_second("later"), START + timedelta(seconds=30))
    clock.advance(1)
    mono[0] += 1
    store.set_schedule_paused("beat", True)
    assert scheduler.run_once() == SchedulerResult()
    assert scheduler.due_at() == pytest.approx(mono[0] + 28.0 + MARGIN_SECONDS)  # "later", read as the following
