"""The scheduler fires each tick exactly once: two schedulers on two `Store`s of one SQLite
file (two processes' worth of connections) tick concurrently on a fake clock, with the
lease and then without it (the claim alone must hold). Missed ticks run once; paused jobs
do not fire; a tick while a run is in flight is recorded `skipped`. Counted, not timed.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.db import job_store, named_leases
from app.db.job_models import JobRow
from app.db.store import Store
from app.schedule.cron import Schedule, ScheduleError, parse
from app.schedule.scheduler import Scheduler

START = 1_800_000_000  # a whole minute


class Clock:
    def __init__(self) -> None:
        self.now = float(START)

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    first, second = Store.open(tmp_path / "jobs.db"), Store.open(tmp_path / "jobs.db")
    yield first, second
    first.close()
    second.close()


def _job(store: Store, job_id: str, schedule: Schedule, *, paused: bool = False) -> None:
    job_store.add(
        store,
        JobRow(
            id=job_id,
            owner="key_a",
            name=job_id,
            schedule=schedule.expr,
            input='"hi"',
            profile="courier",
            max_cost_usd="1",
            paused=paused,
            next_run_at=None if paused else schedule.next_after(START),
        ),
    )


def _race(schedulers: list[Scheduler], clock: Clock, *, seconds: int) -> None:
    """Step the clock a second at a time; at each step every scheduler ticks at once. An
    exception in a tick (a duplicate tick's insert refused) fails the test."""
    failures: list[BaseException] = []

    def run(s: Scheduler, barrier: threading.Barrier) -> None:
        barrier.wait()
        try:
            s.tick()
        except BaseException as exc:
            failures.append(exc)

    for _ in range(seconds):
        clock.now += 1
        barrier = threading.Barrier(len(schedulers))
        threads = [threading.Thread(target=run, args=(s, barrier)) for s in schedulers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []


@pytest.mark.parametrize("use_lease", [True, False])
def test_two_schedulers_on_one_database_fire_each_tick_once(
    stores: tuple[Store, Store], use_lease: bool
) -> None:
    every_2s = parse("*/2 * * * * *", min_interval_s=1, now=START)
    every_3s = parse("*/3 * * * * *", min_interval_s=1, now=START)
    _job(stores[0], "job_a", every_2s)
    _job(stores[0], "job_b", every_3s)
    schedules = {"job_a": every_2s, "job_b": every_3s}
    clock = Clock()
    schedulers = [
        Scheduler(
            store, holder=f"p{i}", schedule_of=schedules.get, clock=clock, use_lease=use_lease
        )
        for i, store in enumerate(stores)
    ]
    for s in schedulers:
        s.use_lease = use_lease
    _race(schedulers, clock, seconds=120)
    runs = job_store.runs(stores[1], job_id="job_a") + job_store.runs(stores[1], job_id="job_b")
    per_tick = Counter((r.job_id, r.scheduled_for) for r in runs)
    assert set(per_tick.values()) == {1}
    assert Counter(job for job, _ in per_tick) == {"job_a": 60, "job_b": 40}
    assert all(r.missed == 0 for r in runs)
    fired = [len(s.fired) for s in schedulers]
    assert sum(fired) == 100
    if use_lease:
        assert sorted(fired) == [0, 100]  # the lease holder fired everything


def test_missed_ticks_after_downtime_run_once(stores: tuple[Store, Store]) -> None:
    hourly = parse("@hourly", min_interval_s=60, now=START)
    _job(stores[0], "job_h", hourly)
    clock = Clock()
    scheduler = Scheduler(stores[0], holder="p", schedule_of={"job_h": hourly}.get, clock=clock)
    clock.now += 3 * 24 * 3600 + 30  # three days down
    assert len(scheduler.tick()) == 1
    assert scheduler.tick() == []
    (run,) = job_store.runs(stores[0], job_id="job_h")
    assert run.scheduled_for == START + 3600
    assert run.missed == 3 * 24 - 1  # the other ticks up to now, run as this one


def test_paused_jobs_do_not_fire_and_a_busy_job_skips(stores: tuple[Store, Store]) -> None:
    minutely = parse("* * * * *", min_interval_s=60, now=START)
    _job(stores[0], "job_p", minutely, paused=True)
    _job(stores[0], "job_m", minutely)
    clock = Clock()
    scheduler = Scheduler(stores[0], holder="p", schedule_of={"job_m": minutely}.get, clock=clock)
    clock.now += 60
    (first,) = scheduler.tick()
    clock.now += 60  # the first run still holds the job
    scheduler.tick()
    runs = job_store.runs(stores[0], job_id="job_m")
    assert [(r.status, r.exit_reason) for r in runs if r.id != first] == [("skipped", "overlap")]
    assert job_store.runs(stores[0], job_id="job_p") == []


def test_a_live_lease_keeps_others_out_until_it_expires(stores: tuple[Store, Store]) -> None:
    assert named_leases.take(stores[0], "scheduler", holder="a", now=100, ttl_s=30)
    assert not named_leases.take(stores[1], "scheduler", holder="b", now=120, ttl_s=30)
    assert named_leases.take(stores[0], "scheduler", holder="a", now=125, ttl_s=30)  # renewed
    assert named_leases.take(stores[1], "scheduler", holder="b", now=156, ttl_s=30)  # expired


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("every day", "not a cron expression"),
        ("61 * * * *", "not a cron expression"),
        ("* * * * * *", "minimum interval"),
        ("*/5 * * * *", "minimum interval"),  # 300 s under a 600 s minimum
    ],
)
def test_bad_schedules_are_refused_with_a_reason(expr: str, why: str) -> None:
    with pytest.raises(ScheduleError, match=why):
        parse(expr, min_interval_s=600, now=START)


def test_aliases_and_explanations() -> None:
    daily = parse("@daily", min_interval_s=60, now=START)
    assert daily.expr == "0 0 * * *"
    assert daily.next_after(START) % 86400 == 0
    assert "00:00" in daily.explain()
