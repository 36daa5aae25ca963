"""The provider-neutral request is a pure function of the stored log.

Replay uses each row's `api_content` verbatim when present, so the same log gives the same
bytes across restarts. Nothing here edits a message list in place. The projection also
guarantees a valid transcript: every tool call is followed by exactly one result before
the next non-tool message, because providers reject anything else with a 400.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

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


def _closing(open_calls: Mapping[str, ToolCall]) -> list[Message]:
    """Synthesised results for calls still open when the transaction ends."""
    return [
        ToolResultMessage(call.id, call.name, INTERRUPTED_RESULT, is_error=True)
        for call in open_calls.values()
    ]


def _images(row: StoredMessage, images: Mapping[str, StoredImage]) -> tuple[Image, ...]:
    found = (images.get(key) for key in row.images)
    return tuple(Image(i.media_type, i.data, i.url) for i in found if i is not None)


@dataclass(slots=True)
class Fold:
    """`project` as a left fold that can be resumed: the state after a prefix of the log.

    The log only grows between rewrites, so a leased session's projection is extended
    row by row instead of rebuilt (see app/agent/context/live_projection.py). `messages` holds
    only what later rows cannot change; the results synthesised for calls still open at
    the end are added by `result`, because the next row may answer them.
    """

    messages: list[Message] = field(default_factory=list)
    open_calls: dict[str, ToolCall] = field(default_factory=dict)

    def feed(
        self, rows: Iterable[StoredMessage], images: Mapping[str, StoredImage] | None = None
    ) -> None:
        out = self.messages
        for row in rows:
            if row.role == "tool":
                call = self.open_calls.pop(row.tool_call_id or "", None)
                if call is None:
                    continue  # a result for no open call would be rejected upstream
                pictures = _images(row, images) if row.images and images else ()
                out.append(
                    ToolResultMessage(
                        call.id, call.name, _text(row), is_error=row.is_error, images=pictures
                    )
                )
                continue
            if self.open_calls:
                out += _closing(self.open_calls)
                self.open_calls = {}
            if row.role == "user":
                pictures = _images(row, images) if row.images and images else ()
                out.append(UserMessage(content=_text(row), images=pictures))
            elif row.role == "system":
                out.append(UserMessage(content=_text(row), instruction=True))
            elif row.role == "assistant":
                calls = _calls(row)
                out.append(AssistantMessage(content=_text(row) or None, tool_calls=calls))
                self.open_calls = {call.id: call for call in calls}

    def result(self) -> tuple[Message, ...]:
        return (*self.messages, *_closing(self.open_calls))


def project(
    rows: Sequence[StoredMessage], images: Mapping[str, StoredImage] | None = None
) -> tuple[Message, ...]:
    fold = Fold()
    fold.feed(rows, images)
    return fold.result()


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


@dataclass(slots=True)
class PendingFold:
    """`unanswered_calls` as a fold that can be resumed: a result answers a call wherever
    it stands in the log, so both the calls still waiting and every answered id are kept."""

    answered: set[str | None] = field(default_factory=set)
    pending: list[tuple[str, str]] = field(default_factory=list)

    def feed(self, rows: Iterable[StoredMessage]) -> None:
        for row in rows:
            if row.role == "tool":
                self.answered.add(row.tool_call_id)
                if any(cid == row.tool_call_id for cid, _ in self.pending):
                    self.pending = [p for p in self.pending if p[0] != row.tool_call_id]
            elif row.role == "assistant":
                self.pending += [
                    (call["id"], call["name"])
                    for call in row.tool_calls
                    if call["id"] not in self.answered
                ]
