"""The model's reply stored before anything acts on it (DESIGN: persist before act).

A reply with tool calls is committed before the first tool runs, so a crash mid-batch
leaves the calls on record and the next request closes them instead of running them
twice; a plain answer rides in the turn's closing commit. On cancel, what was streamed
so far is kept as text and every call left open is closed with a result saying so.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from app.agent.accumulate import Reply
from app.agent.context.close_open_calls import close_unanswered_calls
from app.agent.turn_context import TurnContext, TurnState
from app.db.store import LeaseLost, NewMessage, PersistenceError
from app.providers.base import ToolCall

log = logging.getLogger(__name__)

CANCELLED_RESULT = "error: this tool call was cancelled before it finished; its effect is unknown"


async def persist_intent(ctx: TurnContext, reply: Reply, calls: tuple[ToolCall, ...]) -> None:
    """Store the reply before anything acts on it. With tool calls that is a commit, made on
    the store's writer thread (with the call's deferred usage row) so a stalled disk holds
    this turn only; a plain answer rides in the turn's closing commit."""
    if not calls:
        persist_reply(ctx, reply, calls)
        return
    landing = ctx.store.commit_off_loop(functools.partial(persist_reply, ctx, reply, calls))
    try:
        await asyncio.shield(landing)
    except asyncio.CancelledError:
        # The commit goes on in the writer thread; let it land before the cancellation
        # closes the calls it records, or they would stay open until the next request.
        await asyncio.wait({landing})
        raise


def persist_reply(ctx: TurnContext, reply: Reply, calls: tuple[ToolCall, ...]) -> None:
    if not reply.text and not calls:
        return
    if calls:
        # The tools about to run (a plugin's too) may take the workspace as there. A private
        # one is made here, in the unit that records their intent, on the writer thread: at
        # each session's opening it cost every session without tools, and on the event loop
        # every stream would wait out the file system's journal.
        ctx.workspace.mkdir(parents=True, exist_ok=True)
    ctx.store.append_messages(
        session_id=ctx.session_id,
        lease=ctx.lease,
        turn_id=ctx.turn_id,
        # A reply without calls is acted on by nothing: it rides in the closing commit.
        defer=not calls,
        messages=[
            NewMessage(
                role="assistant",
                content=reply.text or None,
                tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
                reasoning=reply.reasoning or None,
            )
        ],
    )


def keep_partial_reply(ctx: TurnContext, state: TurnState) -> None:
    """On cancel: keep the text produced so far as plain text and close open tool calls."""
    try:
        partial = state.in_flight.reply()
        if partial.text and partial.finish is None:
            persist_reply(ctx, partial, ())
        close_unanswered_calls(
            ctx.store,
            session_id=ctx.session_id,
            lease=ctx.lease,
            turn_id=ctx.turn_id,
            result=CANCELLED_RESULT,
        )
    except (LeaseLost, PersistenceError):
        log.exception("turn %s: could not record the cancellation", ctx.turn_id)
