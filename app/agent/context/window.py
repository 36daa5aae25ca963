"""The loop's hooks into the compressor: a preflight before each upstream call and an
observation after it. Kept out of the loop so the loop reads like the idea."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.agent.context.compressor import Summariser, observe_response, threshold_tokens
from app.agent.context.prompt import recover_stable_boundary
from app.agent.context.row_passes import live_rows, sized
from app.config import Profile
from app.db.models import SessionRow
from app.db.store import StoredMessage
from app.providers.usage import Usage

if TYPE_CHECKING:
    from app.agent.turn_context import TurnContext

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
    ctx: TurnContext, rough: int, session: SessionRow, rows: list[StoredMessage]
) -> Preflight:
    stable_len = recover_stable_boundary(session.system_prompt, ctx.stable_tier)
    return Preflight(rough, session, rows, stable_len)


async def preflight(
    ctx: TurnContext,
    summarise: Summariser,
    *,
    turn_start: bool,
    force: bool = False,
) -> Preflight:
    """Prune (only where it is free) and compact when the projection crosses the threshold."""
    store, profile, comp = ctx.store, ctx.profile, ctx.compressor
    session = store.leased_row(session_id=ctx.session_id)
    assert session is not None
    rows = await live_rows(ctx)
    if comp is None:
        return _checked(ctx, 0, session, rows)
    cold = turn_start and prefix_is_cold(profile, session, time.time())
    if (profile.prune_mid_burst or cold) and await comp.prune(
        store, session, profile, lease=ctx.lease, rows=rows
    ):
        session = store.leased_row(session_id=ctx.session_id)
        assert session is not None
        rows = await live_rows(ctx)
    rough = await sized(comp, session, rows)
    if force or comp.needs_compaction(store, session, profile, rough, lease=ctx.lease):
        prompt = await comp.compact(
            store,
            session,
            profile,
            lease=ctx.lease,
            rows=rows,
            summarise=summarise,
            rebuild_prompt=ctx.rebuild_prompt,
        )
        if prompt is not None:
            session = store.leased_row(session_id=ctx.session_id)
            assert session is not None
            rows = await live_rows(ctx)
            rough = await sized(comp, session, rows)
    return _checked(ctx, rough, session, rows)


def observe(ctx: TurnContext, checked: Preflight, *, usage: Usage | None) -> None:
    """Record the call's billed prompt against the preflight's estimate.

    The row the preflight read is still the truth for what this reads (the verdict latch
    and strike count: only a compaction, done before that read, and this call change
    them, under the turn's lease); reading it again cost a query per upstream call."""
    if ctx.compressor is None:
        return
    observe_response(
        ctx.store,
        checked.session,
        rough_at_call=checked.rough,
        usage=usage,
        threshold=threshold_tokens(ctx.profile),
        lease=ctx.lease,
    )
