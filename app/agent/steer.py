"""Steering: a message sent to a busy session joins the running turn at a safe point.

A steer never interrupts a model call or a tool: it is stored as a user message after the
current tool batch's results (or after the answer, when the model called no tool), so the
next upstream call reads it and the transcript stays valid on every wire. Stored before its
sender hears "accepted": a crash after that point loses nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from app.db.store import NewMessage

if TYPE_CHECKING:
    from app.agent.turn_context import TurnContext

log = logging.getLogger(__name__)


def deliver_steers(ctx: TurnContext) -> bool:
    """Store the waiting steering messages as user turns; True if there were any."""
    taken = ctx.mailbox.take()
    if not taken:
        return False
    try:
        ctx.store.append_messages(
            session_id=ctx.session_id,
            lease=ctx.lease,
            turn_id=ctx.turn_id,
            messages=[NewMessage(role="user", content=text) for text, _ in taken],
        )
    except BaseException:
        # Not stored: the senders fall back to running their message as a turn of its own.
        for _, done in taken:
            done.cancel()
        raise
    log.info("turn %s: %d steering message(s) joined the turn", ctx.turn_id, len(taken))
    for _, done in taken:
        done.set_result(None)
    return True
