"""The provider-neutral request is a pure function of the stored log.

Replay uses each row's `api_content` verbatim when present, so the same log gives the same
bytes across restarts. Nothing here edits a message list in place. The projection also
guarantees a valid transcript: every tool call is followed by exactly one result before
the next non-tool message, because providers reject anything else with a 400.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app.db.chat_store import StoredImage
from app.db.store import StoredMessage
from app.providers.base import (
    AssistantMessage,
    Image,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

INTERRUPTED_RESULT = (
    "error: this tool call was interrupted before it returned a result (the turn was "
    "cancelled or the server restarted); its effect is unknown"
)


def _text(row: StoredMessage) -> str:
    if row.api_content is not None:
        return row.api_content
    return row.content or ""


def _calls(row: StoredMessage) -> tuple[ToolCall, ...]:
    return tuple(
        ToolCall(id=c["id"], name=c["name"], arguments=c.get("arguments", ""))
        for c in row.tool_calls
    )


def _close(open_calls: dict[str, ToolCall], out: list[Message]) -> None:
    """Synthesise results for calls still open when the transaction ends."""
    for call in open_calls.values():
        out.append(ToolResultMessage(call.id, call.name, INTERRUPTED_RESULT, is_error=True))
    open_calls.clear()


def _images(row: StoredMessage, images: Mapping[str, StoredImage]) -> tuple[Image, ...]:
    found = (images.get(key) for key in row.images)
    return tuple(Image(i.media_type, i.data, i.url) for i in found if i is not None)


def project(
    rows: Sequence[StoredMessage], images: Mapping[str, StoredImage] | None = None
) -> tuple[Message, ...]:
    out: list[Message] = []
    open_calls: dict[str, ToolCall] = {}
    for row in rows:
        if row.role == "tool":
            call = open_calls.pop(row.tool_call_id or "", None)
            if call is None:
                continue  # a result for no open call would be rejected upstream
            out.append(ToolResultMessage(call.id, call.name, _text(row), is_error=row.is_error))
            continue
        _close(open_calls, out)
        if row.role == "user":
            pictures = _images(row, images) if row.images and images else ()
            out.append(UserMessage(content=_text(row), images=pictures))
        elif row.role == "system":
            out.append(UserMessage(content=_text(row), instruction=True))
        elif row.role == "assistant":
            calls = _calls(row)
            out.append(AssistantMessage(content=_text(row) or None, tool_calls=calls))
            open_calls = {call.id: call for call in calls}
    _close(open_calls, out)
    return tuple(out)


def unanswered_calls(rows: Sequence[StoredMessage]) -> list[tuple[str, str]]:
    """(call id, tool name) of every tool call in the log with no result row after it."""
    answered = {row.tool_call_id for row in rows if row.role == "tool"}
    return [
        (call["id"], call["name"])
        for row in rows
        if row.role == "assistant"
        for call in row.tool_calls
        if call["id"] not in answered
    ]
