"""A job's schedule: a cron expression in UTC, read by `cronsim` (the maintained parser
behind Healthchecks.io) and turned into integer epoch seconds.

Ticks are integers because the scheduler claims a due tick with a compare-and-set on
`next_run_at`: floats would compare unequal after a round trip through the database.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime

from cronsim import CronSim, CronSimError

ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
"""cronsim refuses the aliases ("Wrong number of fields"), so they are mapped here."""
MISSED_COUNT_CAP = 1000
"""Missed ticks are counted for the record up to this many (a year of minutes is not)."""


class ScheduleError(ValueError):
    """A schedule Courier will not run: the message says why, for the 400."""


def _at(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


@dataclass(frozen=True, slots=True)
class Schedule:
    expr: str
    """The five (or six, seconds first) fields, aliases expanded."""

    def next_after(self, ts: int) -> int:
        """The first tick strictly after `ts` (epoch seconds)."""
        try:
            return int(next(CronSim(self.expr, _at(ts))).timestamp())
        except StopIteration:
            raise ScheduleError(f"schedule {self.expr!r} never fires after {ts}") from None

    def ticks_between(self, after: int, upto: int) -> int:
        """How many ticks fall in (after, upto], counted up to `MISSED_COUNT_CAP`."""
        count, at = 0, after
        while count < MISSED_COUNT_CAP:
            at = self.next_after(at)
            if at > upto:
                break
            count += 1
        return count

    def explain(self) -> str:
        return CronSim(self.expr, _at(0)).explain()


def expand(expr: str) -> str:
    """`expr` with an alias replaced by its five fields."""
    return ALIASES.get(expr.strip().lower(), expr.strip())


def parse(expr: str, *, min_interval_s: int, now: int) -> Schedule:
    """`expr` as a Schedule, or `ScheduleError`: not cron, never fires, or fires more often
    than every `min_interval_s` (the smallest gap among its next 20 ticks)."""
    fields = expand(expr)
    try:
        ticks = [int(t.timestamp()) for t in itertools.islice(CronSim(fields, _at(now)), 21)]
    except CronSimError as exc:
        raise ScheduleError(f"schedule {expr!r} is not a cron expression: {exc}") from None
    if not ticks:
        raise ScheduleError(f"schedule {expr!r} never fires")
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    if gaps and min(gaps) < min_interval_s:
        raise ScheduleError(
            f"schedule {expr!r} fires every {min(gaps)} s; the minimum interval is "
            f"{min_interval_s} s (COURIER_JOB_MIN_INTERVAL_S)"
        )
    return Schedule(fields)
