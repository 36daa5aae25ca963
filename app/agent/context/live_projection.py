"""A leased session's projection, kept in memory and extended instead of rebuilt.

Rebuilding the provider-neutral request from the whole live log before every upstream
call made a turn's CPU grow with the session (about 40 µs per turn already in it). The
store keeps each recently used session's live log as a list that only grows between
rewrites; when it is rewritten (a compaction, a prune, a retraction, a fresh load after
it was forgotten) its rows are new objects. So the kept projection proves it still
describes the log by holding the last row it folded: the same object at the same index
means the same prefix, anything else means a rebuild from the rows given.

With `COURIER_VERIFY_LIVE_LOG=1` (the test suite) every call is compared with a full
reprojection of the log the store read for it (which the store, in that mode, compares
with a fresh database read) and raises on any difference, so a missed invalidation fails
the test that caused it instead of sending a wrong transcript.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

from app.agent.context.cache_planner import (
    CachePlan,
    CacheStrategy,
    PlanMemo,
    StablePrefixRegistry,
    apply_strategy,
)
from app.agent.context.projection import Fold, PendingFold, project, unanswered_calls
from app.db.chat_store import StoredImage, session_images
from app.db.store import Store, StoredMessage
from app.observe.loop_passes import note as note_pass
from app.providers.base import Message

SESSIONS_KEPT = 512
"""Projections kept (least recently used go); matches the store's kept live logs."""


class ProjectionDrift(AssertionError):
    """The kept projection differs from a full reprojection (verification mode only)."""


@dataclass(frozen=True, slots=True)
class Projected:
    messages: tuple[Message, ...]
    stable: int
    """How many leading messages only ever grow while the log does (the planner's memo
    covers them); the rest are results synthesised for calls still open."""
    memo: PlanMemo


@dataclass(slots=True)
class _Kept:
    fold: Fold = field(default_factory=Fold)
    pending: PendingFold = field(default_factory=PendingFold)
    folded: int = 0
    last: StoredMessage | None = None
    images: dict[str, StoredImage] = field(default_factory=dict)
    memo: PlanMemo = field(default_factory=PlanMemo)

    def describes(self, rows: Sequence[StoredMessage]) -> bool:
        if self.folded > len(rows):
            return False
        return self.folded == 0 or rows[self.folded - 1] is self.last


class LiveProjections:
    """Process-wide, one per store: the kept projections of recently used sessions."""

    def __init__(self, store: Store, *, verify: bool | None = None) -> None:
        self._store = store
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._lock = threading.Lock()
        """A turn opens on the store's writer thread (which closes open calls) while other
        sessions' turns project on the event loop: both fold into this."""
        self.verify = os.environ.get("COURIER_VERIFY_LIVE_LOG") == "1" if verify is None else verify
        self.rebuilds = 0
        """Projections built from the start of the log (counted, for tests)."""

    def _advance(self, session_id: str, rows: Sequence[StoredMessage]) -> _Kept:
        kept = self._kept.get(session_id)
        if kept is None or not kept.describes(rows):
            kept = _Kept()
            self.rebuilds += 1
            self._install(session_id, kept)
        else:
            self._kept.move_to_end(session_id)
        self._fold(session_id, kept, rows)
        return kept

    def _install(self, session_id: str, kept: _Kept) -> None:
        self._kept[session_id] = kept
        while len(self._kept) > SESSIONS_KEPT:
            self._kept.popitem(last=False)

    def _fold(self, session_id: str, kept: _Kept, rows: Sequence[StoredMessage]) -> None:
        new = rows[kept.folded :]
        if new:
            note_pass("project", len(new))
            keys = {key for row in new for key in row.images}
            if keys - kept.images.keys():
                # Images are stored once per session and never change, so only a row
                # naming an image not seen yet costs a read.
                kept.images = dict(session_images(self._store, session_id=session_id))
            kept.fold.feed(new, kept.images)
            kept.pending.feed(new)
            kept.folded, kept.last = len(rows), rows[-1]

    def unfolded(self, session_id: str, rows: Sequence[StoredMessage]) -> int:
        """How many of `rows` the next `project` must fold (the rest it has kept)."""
        with self._lock:
            kept = self._kept.get(session_id)
            if kept is None or not kept.describes(rows):
                return len(rows)
            return len(rows) - kept.folded

    def prepare(self, session_id: str, rows: Sequence[StoredMessage]) -> None:
        """Build the projection of `rows` from scratch and keep it, for a worker thread.

        The fold runs outside the lock, which the loop's projections of other sessions
        take: held for a 10,000-row fold it would stall the loop as the fold itself did.
        Only the session's lease holder projects it, and it waits for this.
        """
        kept = _Kept()
        self._fold(session_id, kept, rows)
        with self._lock:
            self.rebuilds += 1
            self._install(session_id, kept)

    def project(self, session_id: str, rows: Sequence[StoredMessage]) -> Projected:
        """The projection of `rows`, the session's live log as the store returned it."""
        with self._lock:
            kept = self._advance(session_id, rows)
            projected = Projected(kept.fold.result(), len(kept.fold.messages), kept.memo)
        if self.verify:
            self._check(session_id, rows, projected.messages)
        return projected

    def unanswered(self, session_id: str, rows: Sequence[StoredMessage]) -> list[tuple[str, str]]:
        """`unanswered_calls(rows)`: (call id, tool name) of every call with no result."""
        with self._lock:
            found = list(self._advance(session_id, rows).pending.pending)
        if self.verify:
            full = unanswered_calls(rows)
            if full != found:
                raise ProjectionDrift(f"kept open calls of {session_id}: {found} != {full}")
        return found

    def plan(
        self,
        projected: Projected,
        messages: Sequence[Message],
        *,
        strategy: CacheStrategy,
        system_prompt: str,
        stable_len: int | None,
        prefixes: StablePrefixRegistry | None,
    ) -> CachePlan:
        """The cache plan of `messages` (the projection plus whatever rides after it),
        resumed from the session's planner memo."""
        plan = apply_strategy(
            strategy,
            system_prompt=system_prompt,
            stable_len=stable_len,
            messages=messages,
            prefixes=prefixes,
            memo=projected.memo,
            stable=projected.stable,
        )
        if self.verify:
            full = apply_strategy(
                strategy,
                system_prompt=system_prompt,
                stable_len=stable_len,
                messages=messages,
                prefixes=prefixes,
            )
            if full != plan:
                raise ProjectionDrift("the remembered cache plan differs from a full plan")
        return plan

    def _check(
        self, session_id: str, rows: Sequence[StoredMessage], messages: tuple[Message, ...]
    ) -> None:
        # `rows` is what the store read for this call, which in verification mode it has
        # itself compared with a fresh database read: reprojecting them from scratch (with
        # the images read afresh) is the full reprojection, at no extra statement.
        images = (
            session_images(self._store, session_id=session_id)
            if any(r.images for r in rows)
            else {}
        )
        full = project(rows, images)
        if full != messages:
            raise ProjectionDrift(
                f"kept projection of {session_id} drifted from a full reprojection: "
                f"{len(messages)} messages kept, {len(full)} reprojected; first difference "
                f"at {_first_difference(messages, full)}"
            )


def _first_difference(a: Sequence[Message], b: Sequence[Message]) -> int:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))


_PER_STORE: WeakKeyDictionary[Store, LiveProjections] = WeakKeyDictionary()
_CREATING = threading.Lock()


def projections_for(store: Store) -> LiveProjections:
    """The store's kept projections (created on first use; gone with the store)."""
    found = _PER_STORE.get(store)
    if found is None:
        with _CREATING:
            found = _PER_STORE.get(store)
            if found is None:
                found = _PER_STORE[store] = LiveProjections(store)
    return found
