"""The scheduler: one per process, it fires each due job's tick once across processes.

Each pass takes (or renews) the `scheduler` named lease, so normally one process fires
everything and the others idle; the compare-and-set in `job_store.fire` and the run's
unique tick are what make a tick fire exactly once even if two passes overlap (a lease
that expired mid-pass, a clock step). Missed ticks after downtime run once: the claim
moves `next_run_at` straight to the first tick after now, and the run records how many
ticks it stands for (`missed`). The clock is injected, so tests step through days of
ticks without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.db import job_store, named_leases
from app.db.store import Store
from app.schedule.cron import Schedule

LEASE_NAME = "scheduler"


@dataclass
class Scheduler:
    store: Store
    holder: str
    """This process's name in the lease (instance id and a random part)."""
    schedule_of: Callable[[str], Schedule | None]
    """A job's schedule by id (None: it is gone); read from the job row in production."""
    lease_s: float = 30.0
    clock: Callable[[], float] = time.time
    use_lease: bool = True
    """False only in the test that proves the claim alone keeps ticks single."""
    fired: list[str] = field(default_factory=list)
    """The runs this scheduler recorded (queued or skipped), in order."""

    def tick(self) -> list[str]:
        """One pass: fire every due tick this scheduler can claim; the new runs' ids."""
        now = int(self.clock())
        if self.use_lease and not named_leases.take(
            self.store, LEASE_NAME, holder=self.holder, now=now, ttl_s=self.lease_s
        ):
            return []
        new: list[str] = []
        for due in job_store.due(self.store, now=now):
            schedule = self.schedule_of(due.job_id)
            if schedule is None:
                continue
            run_id = job_store.fire(
                self.store,
                due,
                next_run_at=schedule.next_after(now),
                missed=schedule.ticks_between(due.due, now),
                launcher=self.holder,
                now=now,
            )
            if run_id is not None:
                new.append(run_id)
        self.fired.extend(new)
        return new
