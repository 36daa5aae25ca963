"""Rate and concurrency limits per principal, and a global cap on running turns.

In memory on purpose: Courier is one process per data directory (the lease model already
assumes it), and a limit that must survive a restart is a spend cap, which is stored.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.security.principal import Principal

WINDOW_S = 60.0
TURN_RETRY_AFTER_S = 2
"""A turn's end cannot be predicted; a short hint keeps voice clients retrying promptly."""


@dataclass(frozen=True, slots=True)
class LimitExceeded(Exception):
    message: str
    retry_after_s: int
    code: str


@dataclass
class TurnSlot:
    """One running turn's share of the caps, released exactly once when the turn ends."""

    limits: Limits
    principal: str
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.limits._release(self.principal)

    def bind(self, task: asyncio.Future[Any] | None) -> None:
        """Hold the slot until `task` ends; a reattached turn (already counted) frees it."""
        if task is None or task.done() or task in self.limits._tasks:
            self.release()
            return
        self.limits._tasks.add(task)

        def done(finished: asyncio.Future[Any]) -> None:
            self.limits._tasks.discard(finished)
            self.release()

        task.add_done_callback(done)


@dataclass
class Limits:
    max_concurrent_turns: int = 10
    clock: Callable[[], float] = time.monotonic
    _requests: dict[str, deque[float]] = field(default_factory=dict)
    _turns: dict[str, int] = field(default_factory=dict)
    _total: int = 0
    _tasks: set[asyncio.Future[Any]] = field(default_factory=set)

    def check_rate(self, principal: Principal) -> None:
        """Count this request against the principal's per-minute budget, or refuse it."""
        limit = principal.requests_per_minute
        if limit is None:
            return
        now = self.clock()
        seen = self._requests.setdefault(principal.owner, deque())
        while seen and now - seen[0] >= WINDOW_S:
            seen.popleft()
        if len(seen) >= limit:
            wait = max(1, math.ceil(WINDOW_S - (now - seen[0])))
            raise LimitExceeded(
                f"rate limit of {limit} requests per minute reached for this key",
                wait,
                "rate_limit_exceeded",
            )
        seen.append(now)

    def acquire_turn(self, principal: Principal) -> TurnSlot:
        if self._total >= self.max_concurrent_turns:
            raise LimitExceeded(
                f"the server is running its maximum of {self.max_concurrent_turns} turns",
                TURN_RETRY_AFTER_S,
                "server_busy",
            )
        running = self._turns.get(principal.owner, 0)
        cap = principal.max_concurrent_turns
        if cap is not None and running >= cap:
            raise LimitExceeded(
                f"this key may run {cap} turn(s) at once",
                TURN_RETRY_AFTER_S,
                "concurrent_turn_limit",
            )
        self._turns[principal.owner] = running + 1
        self._total += 1
        return TurnSlot(self, principal.owner)

    def _release(self, owner: str) -> None:
        self._total = max(0, self._total - 1)
        left = self._turns.get(owner, 1) - 1
        if left > 0:
            self._turns[owner] = left
        else:
            self._turns.pop(owner, None)
