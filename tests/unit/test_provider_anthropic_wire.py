"""Anthropic Messages wire, without a socket: request bodies and the raw-event fold."""

from __future__ import annotations

from typing import Any

import pytest

from app.providers.anthropic import MessagesStreamState, build_messages_body
from app.providers.base import (
    AssistantMessage,
    Finish,
    FinishReason,
    ModelRequest,
    ProviderError,
    ProviderEvent,
    ReasoningDelta,
    SamplingParams,
    SystemBlock,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResultMessage,
    ToolSpec,
    UsageEvent,
    UserMessage,
)
from app.providers.usage import Usage

EPHEMERAL = {"type": "ephemeral"}


def test_body_merges_tool_results_and_following_user_turn() -> None:
    request = ModelRequest(
        model="claude",
        system=(SystemBlock("stable", cache=True), SystemBlock(""), SystemBlock("volatile")),
        messages=(
            UserMessage("hi"),
            AssistantMessage(
                "Checking.",
                (ToolCall("t1", "read", '{"path":"a"}'), ToolCall("t2", "read", "{broken")),
            ),
            ToolResultMessage("t1", "read", "A"),
            ToolResultMessage("t2", "read", "no such file", is_error=True, cache=True),
            UserMessage("and b?"),
            AssistantMessage("", (ToolCall("t3", "list", "[1]"),)),
            ToolResultMessage("t3", "list", ""),
            AssistantMessage("Done."),
        ),
        tools=(ToolSpec("read", "Read a file.", {"type": "object"}),),
        sampling=SamplingParams(temperature=0.5, top_p=0.8, stop=("STOP",)),
    )
    assert build_messages_body(request, default_max_tokens=1000) == {
        "model": "claude",
        "max_tokens": 1000,
        "system": [
            {"type": "text", "text": "stable", "cache_control": EPHEMERAL},
            {"type": "text", "text": "volatile"},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}},
                    # Unparseable arguments go out as {} so the request stays valid.
                    {"type": "tool_use", "id": "t2", "name": "read", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "A"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "content": "no such file",
                        "is_error": True,
                        "cache_control": EPHEMERAL,
                    },
                    {"type": "text", "text": "and b?"},
                ],
            },
            {
                "role": "assistant",
                # No empty text block; a non-object input becomes {}.
                "content": [{"type": "tool_use", "id": "t3", "name": "list", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t3"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        ],
        "tools": [
            {"name": "read", "description": "Read a file.", "input_schema": {"type": "object"}}
        ],
        "stop_sequences": ["STOP"],
        "temperature": 0.5,
        "top_p": 0.8,
    }


def test_marker_on_empty_item_lands_on_the_block_ending_the_same_prefix() -> None:
    request = ModelRequest(
        model="claude",
        system=(SystemBlock("s"), SystemBlock("", cache=True)),
        messages=(UserMessage("q"), UserMessage("", cache=True)),
        sampling=SamplingParams(max_tokens=5),
        cache_ttl="1h",
    )
    body = build_messages_body(request)
    one_hour = {"type": "ephemeral", "ttl": "1h"}
    assert body["system"] == [{"type": "text", "text": "s", "cache_control": one_hour}]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "q", "cache_control": one_hour}]}
    ]
    assert body["max_tokens"] == 5
    assert "tools" not in body and "stop_sequences" not in body and "temperature" not in body


# ---------------------------------------------------------------------------- stream fold


def _fold(events: list[dict[str, Any]]) -> list[ProviderEvent]:
    state = MessagesStreamState()
    return [out for event in events for out in state.fold(event)] + state.finish()


def _start(usage: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message_start", "message": {"id": "m", "usage": usage}}


def _stop(reason: str, usage: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "message_delta", "delta": {"stop_reason": reason}, "usage": usage},
        {"type": "message_stop"},
    ]


def test_fold_text_thinking_tools_and_merged_usage() -> None:
    start_usage = {
        "input_tokens": 12,
        "cache_read_input_tokens": 900,
        "cache_creation_input_tokens": 100,
        "output_tokens": 1,
    }
    events = _fold(
        [
            _start(start_usage),
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "hmm"},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "s"},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "Hi"},
            },
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {"type": "tool_use", "id": "tu", "name": "read", "input": {}},
            },
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": ""},
            },
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": '{"p":'},
            },
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": '"x"}'},
            },
            {"type": "ping"},
            *_stop("tool_use", {"output_tokens": 40}),
        ]
    )
    merged = {**start_usage, "output_tokens": 40}
    assert events == [
        ReasoningDelta("hmm"),
        TextDelta("Hi"),
        ToolCallDelta(0, id="tu", name="read"),
        ToolCallDelta(0, arguments='{"p":'),
        ToolCallDelta(0, arguments='"x"}'),
        UsageEvent(
            Usage(input_tokens=12, output_tokens=40, cache_read_tokens=900, cache_write_tokens=100),
            raw=merged,
        ),
        Finish("tool_calls"),
    ]


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
    ],
)
def test_fold_stop_reasons(stop_reason: str, finish: FinishReason) -> None:
    events = _fold(
        [_start({"input_tokens": 1, "output_tokens": 0}), *_stop(stop_reason, {"output_tokens": 2})]
    )
    assert events[-1] == Finish(finish)


def test_stream_without_stop_reason_is_dropped() -> None:
    state = MessagesStreamState()
    state.fold(_start({"input_tokens": 1, "output_tokens": 0}))
    state.fold(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}
    )
    with pytest.raises(ProviderError) as caught:
        state.finish()
    assert caught.value.kind == "stream_dropped"
