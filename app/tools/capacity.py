"""How many tool processes run at once: sized by the machine, queued past it.

A streamed text turn costs a socket and a few kilobytes; a terminal call costs a sandbox,
a process tree, up to its memory limit and a core. So the turn cap is sized for streams
(1,024) and this one for processes: past it, a call waits its turn in arrival order rather
than failing, and the turn it belongs to simply takes longer. A cap on turns that protected
the machine this way refused the eleventh chat, which never started a process at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

MIN_SLOTS = 2
"""Even a one-core box runs two: one long build must not hold every other turn's `ls`."""
PER_CPU = 2
"""Tool commands mostly wait (on disk, on the network, on a child): two per core keeps the
cores busy without a run queue that slows every one of them down."""


def machine_slots(tool_memory_bytes: int, *, cpus: int | None = None) -> int:
    """`max(2, min(2 x CPUs, memory // one call's memory limit))`, read once at startup."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0))
    by_memory = _memory_bytes() // max(1, tool_memory_bytes)
    return max(MIN_SLOTS, min(PER_CPU * cpus, by_memory))


def _memory_bytes() -> int:
    """The machine's memory, or this process's cgroup limit when that is lower (a
    container sees the host's MemTotal in /proc/meminfo)."""
    total = _meminfo_total()
    limit = _cgroup_memory_max()
    return min(total, limit) if limit is not None else total


def _meminfo_total() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 4 * 1024**3  # unknown: a small machine's worth, so the CPU bound decides


def _cgroup_memory_max() -> int | None:
    try:
        own = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    for line in own.splitlines():
        if line.startswith("0::"):  # cgroup v2: one unified hierarchy
            path = Path("/sys/fs/cgroup") / line[3:].lstrip("/") / "memory.max"
            try:
                raw = path.read_text().strip()
            except OSError:
                return None
            return int(raw) if raw.isdigit() else None
    return None


class ToolSlots:
    """A FIFO queue of places for process-spawning tool calls (`Tool.spawns_process`).

    `hold()` waits for a place and keeps it for the call's run; a call cancelled while it
    waits leaves the queue without taking one (asyncio.Semaphore's own guarantee), so a
    cancelled turn's queued commands never run."""

    def __init__(
        self,
        limit: int,
        *,
        on_busy: Callable[[int], None] | None = None,
        on_waited: Callable[[float], None] | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError("a tool slot limit must be at least 1")
        self.limit = limit
        self.busy = 0
        self._free = asyncio.Semaphore(limit)
        self._on_busy = on_busy
        self._on_waited = on_waited

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        asked = time.monotonic()
        async with self._free:
            self._count(+1)
            if self._on_waited is not None:
                self._on_waited(time.monotonic() - asked)
            try:
                yield
            finally:
                self._count(-1)

    def _count(self, change: int) -> None:
        self.busy += change
        if self._on_busy is not None:
            self._on_busy(self.busy)
