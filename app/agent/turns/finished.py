"""What the server keeps of its finished turns, and how much of it.

Finished turns are kept for replays (a reattaching retry, `/v1/sessions/{id}/events`, a
repeated idempotency key) until 10,000 newer ones push them out. Counted in turns alone,
that memory scaled with the answers: 10,000 finished turns of 100 KB each held 1 GB. So
each sealed turn's events are kept compactly (`SealedHistory`, `handle.py`) and the whole
set is held
to a byte budget too (`KeptTurns`): past it the oldest finished turns are forgotten, as if
newer turns had pushed them out. A retry then finds the durable idempotency record instead,
and `/events` says the server no longer holds the turn.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict, deque
from collections.abc import Callable

from app.agent.turns.handle import TurnHandle

MAX_KEPT_BYTES = 64 << 20
"""The budget for every finished turn's kept events together: a few thousand long answers,
or the 10,000 turns the count allows at about 6 KB each."""

_HANDLE_BYTES = 2048
"""A kept handle's own attributes, its done task and its outcome, beyond `nbytes` (measured
with tracemalloc over 1,000 finished 40-chunk text turns: 1.9 KB each)."""


class _Kept(weakref.ref[TurnHandle]):
    """A kept turn's entry: its handle, weakly, and what it is charged. One object per
    turn (a closure per turn for the release note cost about 170 bytes more each)."""

    __slots__ = ("entry", "size")
    entry: int
    size: int


class KeptTurns:
    """The byte budget over finished turns, oldest first. It holds no turn alive itself:
    a turn the maps forgot on their own (by count or age) leaves the account when it is
    freed. Event-loop thread only, except the release note a freed turn leaves, which may
    come from whichever thread dropped the last reference."""

    def __init__(self, forget: Callable[[TurnHandle], None], max_bytes: int) -> None:
        self._forget = forget
        """Takes a turn out of every map that remembers it."""
        self.max_bytes = max_bytes
        self.bytes = 0
        self._kept: OrderedDict[int, _Kept] = OrderedDict()
        """Per turn added, in the order it was added."""
        self._added = 0
        self._freed: deque[_Kept] = deque()
        """Entries whose handle was freed; `deque.append` is atomic across threads."""

    def __len__(self) -> int:
        return len(self._kept)

    def add(self, handle: TurnHandle, nbytes: int) -> None:
        """Account for a turn just sealed; forget the oldest while over the budget (never
        the one just added: a single turn over the budget stays until the next one)."""
        self._settle()
        kept = _Kept(handle, self._freed.append)
        self._added = kept.entry = self._added + 1
        kept.size = nbytes + _HANDLE_BYTES
        self._kept[kept.entry] = kept
        self.bytes += kept.size
        while self.bytes > self.max_bytes and len(self._kept) > 1:
            oldest = next(iter(self._kept.values()))
            self._drop(oldest)
            if (old := oldest()) is not None:
                self._forget(old)

    def _settle(self) -> None:
        while self._freed:
            self._drop(self._freed.popleft())

    def _drop(self, kept: _Kept) -> None:
        if self._kept.pop(kept.entry, None) is not None:
            self.bytes -= kept.size
