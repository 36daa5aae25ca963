"""Where the passes over a long session's rows ran: the event loop or a worker thread.

A first upstream call on a 10,000-message session reads and decodes every row, sizes them,
projects them and encodes them for the wire; on the event loop each of those held every
other stream silent for tens of milliseconds. They run on worker threads instead (see
app/agent/context/row_passes.py), and each such pass is counted here by the thread it ran on, so a
test (or an operator, through `courier_long_passes_total`) sees a pass that slipped back
onto the loop as a number instead of as a stalled stream on a slow machine.

Shared by the store, the agent and the providers: no dependency on any of them.
"""

from __future__ import annotations

import asyncio
import threading
from asyncio import events
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Literal, TypeVar

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

LONG_PASS = 64
"""Rows (or messages) past which a pass is worth a thread hop: a shorter one costs less
than the hop. The same figure as request translation's (`LONG_HISTORY` in
app/api/chat/serving.py)."""

Work = Literal["load", "size", "project", "encode", "compact", "prune"]
T = TypeVar("T")

_counts: Counter[tuple[str, str]] = Counter()
_lock = threading.Lock()


def is_long(rows: int) -> bool:
    return rows > LONG_PASS


def note(work: Work, rows: int) -> None:
    """Count a pass of `work` over `rows` rows if it is long, by the thread it runs on."""
    if rows <= LONG_PASS:
        return
    # As app/db/stats.py tells a commit on the loop: a thread running a loop has one set.
    thread = "loop" if events._get_running_loop() is not None else "worker"
    with _lock:
        _counts[(work, thread)] += 1


async def off_loop(rows: int, work: Callable[[], T]) -> T:
    """`work()`, a pass over `rows` rows: on a worker thread when that is long, else here."""
    return work() if rows <= LONG_PASS else await on_worker(work)


async def on_worker(work: Callable[[], T]) -> T:
    """`work()` on a worker thread. A cancelled caller still waits for it to end: what the
    pass keeps (a read of the log) must not land after the writes the cancellation makes
    (the turn's partial reply), or it would miss them."""
    running = asyncio.ensure_future(asyncio.to_thread(work))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        await asyncio.wait({running})
        raise


def counts() -> dict[tuple[str, str], int]:
    """(work, thread) -> long passes so far in this process."""
    with _lock:
        return dict(_counts)


class LongPassCollector(Collector):
    """Exposes the counts as `courier_long_passes_total{work, thread}`."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "courier_long_passes",
            "Passes over more than 64 rows of one session, by the thread that ran them",
            labels=["work", "thread"],
        )
        for (work, thread), value in sorted(counts().items()):
            family.add_metric([work, thread], value)
        yield family
