"""Parse a chat-completions SSE body and check it the way the official SDKs read it.

Each check names a crash a real client hit (see ../shared/CLIENTS.md): an `id:` line makes
the Python SDK yield an empty event, an empty or non-JSON `data:` payload crashes its JSON
decoder, a repeated role or tool-call id/name is concatenated by the stream accumulator, a
choice without `finish_reason` or a stream without the role chunk throws.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.support.spec import errors


@dataclass
class SseEvent:
    event: str | None
    data: str


@dataclass
class FoldedStream:
    """What an SDK's accumulator ends up with, plus the raw chunks."""

    chunks: list[dict[str, Any]]
    content: str = ""
    finish_reason: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    named_events: list[SseEvent] = field(default_factory=list)


def parse_sse(text: str) -> tuple[list[SseEvent], list[str]]:
    """Events (data lines joined), and the field names seen (to catch `id:`/`retry:`)."""
    events: list[SseEvent] = []
    fields: list[str] = []
    event: str | None = None
    data: list[str] = []
    for line in text.split("\n"):
        line = line.removesuffix("\r")
        if line == "":
            if data or event is not None:
                events.append(SseEvent(event, "\n".join(data)))
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        fields.append(name)
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data or event is not None:
        events.append(SseEvent(event, "\n".join(data)))
    return events, fields


def check_chat_stream(text: str, *, include_usage: bool) -> FoldedStream:
    """Assert `text` is a stream every official SDK reads; return the folded result."""
    events, fields = parse_sse(text)
    # `id` is each frame's place in the turn (for a resume); every SDK's decoder skips it.
    assert set(fields) <= {"data", "event", "id"}, f"unexpected SSE fields {set(fields)}"
    assert events and events[-1].data == "[DONE]", "the stream must end with data: [DONE]"
    chunks: list[dict[str, Any]] = []
    named: list[SseEvent] = []
    for ev in events[:-1]:
        assert ev.data.strip(), "an empty data: payload crashes the SDK's JSON decoder"
        payload = json.loads(ev.data)
        if ev.event is not None:
            named.append(ev)
            continue
        problems = errors("CreateChatCompletionStreamResponse", payload)
        assert not problems, f"chunk not spec-valid: {problems}\n{payload}"
        chunks.append(payload)
    folded = FoldedStream(chunks, named_events=named)
    assert chunks, "no chunks"
    first_choices = chunks[0]["choices"]
    assert first_choices and first_choices[0]["delta"].get("role") == "assistant", chunks[0]
    roles = [c for ch in chunks for c in ch["choices"] if c["delta"].get("role") is not None]
    assert len(roles) == 1, "role must be sent once (the accumulator concatenates it)"
    calls: dict[int, dict[str, Any]] = {}
    finishes: list[str] = []
    for position, chunk in enumerate(chunks):
        if include_usage:
            assert "usage" in chunk, "with include_usage every chunk carries usage (null)"
        if not chunk["choices"]:
            assert include_usage, "an empty-choices chunk crashes clients that did not ask"
            assert position == len(chunks) - 1, "the usage chunk must be the last one"
            assert chunk.get("usage") is not None
            folded.usage = chunk["usage"]
            continue
        if chunk.get("usage") is not None:
            raise AssertionError(f"usage on a choice chunk: {chunk}")
        for choice in chunk["choices"]:
            assert choice["index"] == 0
            delta = choice["delta"]
            if isinstance(delta.get("content"), str):
                folded.content += delta["content"]
            for fragment in delta.get("tool_calls") or []:
                _fold_call(calls, fragment)
            if choice.get("finish_reason") is not None:
                finishes.append(choice["finish_reason"])
    assert len(finishes) == 1, f"exactly one finish_reason expected, got {finishes}"
    folded.finish_reason = finishes[0]
    if include_usage:
        assert folded.usage is not None, "include_usage asked, but no usage chunk came"
    assert sorted(calls) == list(range(len(calls))), f"tool-call indexes {sorted(calls)}"
    folded.tool_calls = [calls[i] for i in sorted(calls)]
    return folded


def _fold_call(calls: dict[int, dict[str, Any]], fragment: dict[str, Any]) -> None:
    index = fragment["index"]
    function = fragment.get("function") or {}
    if index not in calls:
        # Pipecat reads calls in index order: a new index must be the next one.
        assert index == len(calls), f"tool call index {index} out of order"
        assert fragment.get("id") and function.get("name"), "first fragment needs id and name"
        calls[index] = {"id": fragment["id"], "name": function["name"], "arguments": ""}
    else:
        assert not fragment.get("id"), "a tool call's id is sent once (SDKs concatenate it)"
        assert not function.get("name"), "a tool call's name is sent once"
    calls[index]["arguments"] += function.get("arguments") or ""
