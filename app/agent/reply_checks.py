"""Replies that need a second look before the loop acts on them.

Three upstream replies look like answers but are not: an empty one (no text, no tool
call), a text cut off by the output token limit, and a tool call cut off in the middle of
its arguments. Taken at face value the first reaches the client as `content: null` with
`finish_reason: stop`, the second as half an answer, and the third runs a tool with
arguments the model never finished writing. The loop hands each reply here first.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Protocol

from app.agent.accumulate import Reply
from app.agent.events import TurnError
from app.db.store import NewMessage, Store
from app.providers.base import AssistantMessage, Message, ToolCall, UserMessage

log = logging.getLogger(__name__)

EMPTY_NUDGE = (
    "Your last reply was empty: it had no text and no tool call. "
    "Reply to the user now, or call a tool."
)
CONTINUE_NOTE = (
    "Your reply above was cut off by the output token limit. Continue exactly where it "
    "stopped, without repeating anything and without starting over."
)
CUT_CALL_RESULT = (
    "error: this tool call was cut off by the output token limit in the middle of its "
    "arguments, so it was not run. Call the tool again with shorter arguments (for a long "
    "file, write it in several smaller parts)."
)


class Again(Protocol):
    """Ask the model again with `tail` after the conversation; `joined` says the new reply
    continues the previous text (no paragraph break is streamed before it)."""

    def __call__(self, *, tail: tuple[Message, ...], joined: bool) -> Awaitable[Reply]: ...


@dataclass(frozen=True, slots=True)
class Looked:
    reply: Reply
    empty: bool = False
    """Still empty after one nudge: the turn ends with `empty_reply`."""
    truncated: bool = False
    """Still cut by the output limit after the profile's continuations: `truncated`."""
    continuations: int = 0


def is_empty(reply: Reply) -> bool:
    """Nothing the client or the loop could act on (reasoning alone is not an answer)."""
    return not reply.text.strip() and not reply.calls


async def second_look(reply: Reply, again: Again, *, max_continuations: int) -> Looked:
    """The reply to act on: an empty one retried once with a nudge, a text cut by `length`
    continued up to `max_continuations` times with the pieces joined.

    The nudge and the continuation requests ride after the cached prefix and are never
    persisted: only the joined answer becomes part of the conversation.
    """
    if is_empty(reply):
        log.info("empty upstream reply (finish %s); one nudge", reply.finish)
        reply = await again(tail=(UserMessage(EMPTY_NUDGE),), joined=False)
        if is_empty(reply):
            return Looked(reply, empty=True)
    pieces = 0
    while reply.finish == "length" and reply.text and not reply.calls:
        if pieces >= max_continuations:
            return Looked(reply, truncated=True, continuations=pieces)
        pieces += 1
        tail: tuple[Message, ...] = (
            AssistantMessage(content=reply.text),
            UserMessage(CONTINUE_NOTE),
        )
        more = await again(tail=tail, joined=True)
        reply = replace(
            more,
            text=reply.text + more.text,
            reasoning=reply.reasoning + more.reasoning,
            events=reply.events + more.events,
        )
    return Looked(reply, continuations=pieces)


def cut_calls(reply: Reply, calls: tuple[ToolCall, ...]) -> frozenset[str]:
    """Ids of the calls a `length` cut left with arguments that do not parse.

    Repair already refused to close these up (a cut `content` must not become a silently
    truncated file), so running them could only fail less clearly than this says.
    """
    if reply.finish != "length":
        return frozenset()
    return frozenset(c.id for c in calls if not _object(c.arguments))


def close_cut_calls(
    store: Store,
    *,
    session_id: str,
    lease: str,
    turn_id: str,
    calls: tuple[ToolCall, ...],
    cut: frozenset[str],
) -> tuple[ToolCall, ...]:
    """Answer the cut calls with an error result the model reads; the rest still run."""
    closing = [c for c in calls if c.id in cut]
    if closing:
        log.info("turn %s: %d tool call(s) cut mid-arguments", turn_id, len(closing))
        store.append_messages(
            session_id=session_id,
            lease=lease,
            turn_id=turn_id,
            messages=[
                NewMessage(
                    role="tool",
                    content=CUT_CALL_RESULT,
                    tool_call_id=c.id,
                    tool_name=c.name,
                    is_error=True,
                )
                for c in closing
            ],
        )
    return tuple(c for c in calls if c.id not in cut)


def empty_reply_error(*, side_effects: bool) -> TurnError:
    """What the client sees when the model said nothing, also after a nudge."""
    return TurnError(
        message="the upstream model returned an empty reply (no text, no tool call), "
        "also after one retry",
        type="upstream_error",
        code="empty_reply",
        # A fresh attempt may well answer; after a server tool ran it would run it again.
        retryable=not side_effects,
    )


def _object(raw: str) -> bool:
    if not raw.strip():
        return True
    try:
        return isinstance(json.loads(raw), dict)
    except ValueError:
        return False
