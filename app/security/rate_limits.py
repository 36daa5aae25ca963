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
from typing import Any, TypeVar

from app.security.principal import Principal

WINDOW_S = 60.0
K = TypeVar("K")
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
    end_user: str | None = None
    """The app's end user the turn runs for (None: not counted per end user)."""
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.limits._release(self.principal, self.end_user)

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
    max_concurrent_turns: int = 1024
    max_turns_per_end_user: int | None = None
    """Turns one end user of a key may run at once: fairness among an app's users, who all
    share the app's key and its cap. None = no such cap."""
    clock: Callable[[], float] = time.monotonic
    _requests: dict[str, deque[float]] = field(default_factory=dict)
    _turns: dict[str, int] = field(default_factory=dict)
    _end_users: dict[tuple[str, str], int] = field(default_factory=dict)
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

    def acquire_turn(self, principal: Principal, *, end_user: str | None = None) -> TurnSlot:
        """A place under the global, per-key and (for a named end user) per-end-user caps."""
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
        person = (principal.owner, end_user or "")
        theirs = self._end_users.get(person, 0)
        per_person = self.max_turns_per_end_user
        if end_user and per_person is not None and theirs >= per_person:
            raise LimitExceeded(
                f"this end user may run {per_person} turn(s) at once",
                TURN_RETRY_AFTER_S,
                "end_user_turn_limit",
            )
        self._turns[principal.owner] = running + 1
        if end_user:
            self._end_users[person] = theirs + 1
        self._total += 1
        return TurnSlot(self, principal.owner, end_user)

    def _release(self, owner: str, end_user: str | None) -> None:
        self._total = max(0, self._total - 1)
        _count_down(self._turns, owner)
        if end_user:
            _count_down(self._end_users, (owner, end_user))


def _count_down(counts: dict[K, int], key: K) -> None:
    """One fewer for `key`, forgetting it at zero (a key per end user would otherwise stay)."""
    left = counts.get(key, 1) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
