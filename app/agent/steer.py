"""Steering: a message sent to a busy session joins the running turn at a safe point.

A steer never interrupts a model call or a tool: it is stored as a user message after the
current tool batch's results (or after the answer, when the model called no tool), so the
next upstream call reads it and the transcript stays valid on every wire. Stored before its
sender hears "accepted": a crash after that point loses nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from app.db.store import NewMessage

if TYPE_CHECKING:
    from app.agent.loop import TurnContext

log = logging.getLogger(__name__)


class Mailbox:
    """Messages for a running turn, each with a future its sender waits on."""

    def __init__(self) -> None:
        self._waiting: list[tuple[str, asyncio.Future[None]]] = []

    def put(self, text: str) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((text, done))
        return done

    def take(self) -> list[tuple[str, asyncio.Future[None]]]:
        """Every waiting message whose sender still waits (a withdrawn one is skipped)."""
        taken, self._waiting = self._waiting, []
        return [(text, done) for text, done in taken if not done.done()]


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
