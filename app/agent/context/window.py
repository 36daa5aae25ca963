"""The loop's hooks into the compressor: a preflight before each upstream call and an
observation after it. Kept out of the loop so the loop reads like the idea.

They take the parts of a turn they read (`SessionWindow`), not the whole turn: the context
room sits below the turn that uses it, and a hook that took the turn would tie the two
together both ways.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from app.agent.context.compressor import (
    Compressor,
    Summariser,
    observe_response,
    threshold_tokens,
)
from app.agent.context.prompt import recover_stable_boundary
from app.agent.context.row_passes import live_rows, sized
from app.config import Profile
from app.db.models import SessionRow
from app.db.store import Store, StoredMessage
from app.providers.usage import Usage


@dataclass(frozen=True, slots=True)
class SessionWindow:
    """What the context window reads of a turn: its session under the lease, the limits of
    the profile it runs on now (a fallback changes them), and the compressor."""

    store: Store
    session_id: str
    lease: str
    profile: Profile
    compressor: Compressor | None
    """None: the window is never pruned or compacted."""
    stable_tier: str
    """The stable tier the session's prompt starts with; each call proves it again, since
    a compaction rebuilds the prompt."""
    rebuild_prompt: Callable[[], str]
    """Rebuild the session's system prompt from its stored inputs (used by compaction)."""


TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}


def prefix_is_cold(profile: Profile, session: SessionRow, now: float) -> bool:
    """The provider's cache has expired since the last call: rewriting history is free."""
    if session.last_call_at is None:
        return False
    return now - session.last_call_at > TTL_SECONDS[profile.cache_ttl]


@dataclass(frozen=True, slots=True)
class Preflight:
    rough: int
    """Our rough size of the request about to be sent: half of the calibration pair."""
    session: SessionRow
    rows: list[StoredMessage]
    """The live log the request is projected from, read once per upstream call."""
    stable_len: int | None = None
    """Proven end of the stable tier in `session.system_prompt` (None: no marker there)."""

    @property
    def prompt(self) -> str:
        """The session's system prompt as stored now: a compaction rebuilds it."""
        return self.session.system_prompt


def _checked(
    window: SessionWindow, rough: int, session: SessionRow, rows: list[StoredMessage]
) -> Preflight:
    stable_len = recover_stable_boundary(session.system_prompt, window.stable_tier)
    return Preflight(rough, session, rows, stable_len)


async def preflight(
    window: SessionWindow,
    summarise: Summariser,
    *,
    turn_start: bool,
    force: bool = False,
) -> Preflight:
    """Prune (only where it is free) and compact when the projection crosses the threshold."""
    store, profile, comp = window.store, window.profile, window.compressor
    sid, lease = window.session_id, window.lease
    session = store.leased_row(session_id=sid)
    assert session is not None
    rows = await live_rows(store, sid)
    if comp is None:
        return _checked(window, 0, session, rows)
    cold = turn_start and prefix_is_cold(profile, session, time.time())
    if (profile.prune_mid_burst or cold) and await comp.prune(
        store, session, profile, lease=lease, rows=rows
    ):
        session = store.leased_row(session_id=sid)
        assert session is not None
        rows = await live_rows(store, sid)
    rough = await sized(comp, session, rows)
    if force or comp.needs_compaction(store, session, profile, rough, lease=lease):
        prompt = await comp.compact(
            store,
            session,
            profile,
            lease=lease,
            rows=rows,
            summarise=summarise,
            rebuild_prompt=window.rebuild_prompt,
        )
        if prompt is not None:
            session = store.leased_row(session_id=sid)
            assert session is not None
            rows = await live_rows(store, sid)
            rough = await sized(comp, session, rows)
    return _checked(window, rough, session, rows)


def observe(window: SessionWindow, checked: Preflight, *, usage: Usage | None) -> None:
    """Record the call's billed prompt against the preflight's estimate.

    The row the preflight read is still the truth for what this reads (the verdict latch
    and strike count: only a compaction, done before that read, and this call change
    them, under the turn's lease); reading it again cost a query per upstream call."""
    if window.compressor is None:
        return
    observe_response(
        window.store,
        checked.session,
        rough_at_call=checked.rough,
        usage=usage,
        threshold=threshold_tokens(window.profile),
        lease=window.lease,
    )
