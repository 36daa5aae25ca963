"""OpenAI chat wire, without a socket: request bodies, SSE framing and the stream fold."""

from __future__ import annotations

import json
from typing import Any

import pytest

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
    coalesced,
)
from app.providers.openai_chat import ChatStreamState, build_chat_body, completion_events
from app.providers.sse_decoder import SSEDecoder, SSEEvent
from app.providers.usage import Usage

WEATHER = ToolSpec(
    name="weather",
    description="Weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)

REQUEST = ModelRequest(
    model="m",
    system=(SystemBlock("stable", cache=True), SystemBlock("volatile")),
    messages=(
        UserMessage("hi"),
        AssistantMessage(None, (ToolCall("c1", "weather", '{"city":"Oslo"}'),)),
        ToolResultMessage("c1", "weather", "sunny", cache=True),
        AssistantMessage("It is sunny."),
        UserMessage("thanks", cache=True),
    ),
    tools=(WEATHER,),
    sampling=SamplingParams(temperature=0.2, top_p=0.9, stop=("END",), max_tokens=64),
    prompt_cache_key="session-1",
)

TOOLS_WIRE = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
TOOL_CALLS_WIRE = [
    {
        "id": "c1",
        "type": "function",
        "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
    }
]


def test_body_without_cache_markers_is_plain_and_has_no_markers() -> None:
    assert build_chat_body(REQUEST) == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "stable\n\nvolatile"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS_WIRE},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "thanks"},
        ],
        "tools": TOOLS_WIRE,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop": ["END"],
        "max_tokens": 64,
        "prompt_cache_key": "session-1",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert "cache_control" not in json.dumps(build_chat_body(REQUEST))


def test_body_with_cache_markers_puts_them_on_marked_parts_only() -> None:
    request = ModelRequest(
        model="m",
        system=REQUEST.system,
        messages=REQUEST.messages,
        cache_ttl="1h",
    )
    marker = {"type": "ephemeral", "ttl": "1h"}
    assert build_chat_body(request, cache_markers=True)["messages"] == [
        {
            "role": "system",
            "content": [
                {"type": "text", "text": "stable", "cache_control": marker},
                {"type": "text", "text": "volatile"},
            ],
        },
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS_WIRE},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": [{"type": "text", "text": "sunny", "cache_control": marker}],
        },
        {"role": "assistant", "content": "It is sunny."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "thanks", "cache_control": marker}],
        },
    ]


def test_default_ttl_marker_has_no_ttl_and_empty_system_is_omitted() -> None:
    request = ModelRequest(
        model="m", system=(SystemBlock(""),), messages=(UserMessage("q", cache=True),)
    )
    body = build_chat_body(request, cache_markers=True)
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}}],
        }
    ]
    assert "tools" not in body and "max_tokens" not in body and "prompt_cache_key" not in body


# ---------------------------------------------------------------------------- SSE decoder


def _decode(chunks: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    return events + decoder.close()


def test_sse_lines_comments_multiline_and_done() -> None:
    stream = (
        b': keepalive\n\ndata: {"a": 1}\n\nevent: error\ndata: {"b":\ndata: 2}\n\ndata:[DONE]\n\n'
    )
    expected = [
        SSEEvent('{"a": 1}'),
        SSEEvent('{"b":\n2}', event="error"),
        SSEEvent("[DONE]"),
    ]
    assert _decode([stream]) == expected
    # Every possible split point, including inside CRLF pairs and UTF-8 sequences.
    crlf = stream.replace(b"\n", b"\r\n")
    for split in range(len(crlf)):
        assert _decode([crlf[:split], crlf[split:]]) == expected
    one_byte_chunks = [crlf[i : i + 1] for i in range(len(crlf))]
    assert _decode(one_byte_chunks) == expected


def test_sse_utf8_split_bare_cr_and_missing_final_blank_line() -> None:
    payload = 'data: {"t": "héllo ☃"}'.encode()
    assert _decode([payload[:14], payload[14:] + b"\r"]) == [SSEEvent('{"t": "héllo ☃"}')]
    assert _decode([b"data: x\rdata: y\r\r"]) == [SSEEvent("x\ny")]
    assert _decode([b"\xef\xbb\xbfdata: bom\n\n"]) == [SSEEvent("bom")]


# ---------------------------------------------------------------------------- stream fold


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


def _fold(chunks: list[dict[str, Any]]) -> list[ProviderEvent]:
    state = ChatStreamState()
    return [event for chunk in chunks for event in state.fold(chunk)] + state.finish()


def test_fold_text_reasoning_and_late_usage() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 60},
    }
    events = _fold(
        [
            _chunk({"role": "assistant", "content": ""}),
            _chunk({"reasoning_content": "think"}),
            _chunk({"reasoning": "more", "content": None}),
            _chunk({"content": "Hel"}),
            _chunk({"content": "lo"}, finish="stop"),
            {"choices": [], "usage": usage},  # usage after finish_reason, as OpenAI does
        ]
    )
    assert events == [
        ReasoningDelta("think"),
        ReasoningDelta("more"),
        TextDelta("Hel"),
        TextDelta("lo"),
        UsageEvent(Usage(input_tokens=40, output_tokens=7, cache_read_tokens=60), raw=usage),
        Finish("stop"),
    ]


def test_fold_tool_call_fragments_with_id_and_name_once() -> None:
    events = _fold(
        [
            _chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}}
                    ]
                }
            ),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]}),
            # A server that repeats id and name on every fragment.
            _chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "a", "function": {"name": "f", "arguments": "1}"}}
                    ]
                }
            ),
            _chunk(
                {
                    "tool_calls": [
                        {"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}
                    ]
                }
            ),
            _chunk(finish="tool_calls"),
        ]
    )
    assert events == [
        ToolCallDelta(0, id="a", name="f"),
        ToolCallDelta(0, arguments='{"x":'),
        ToolCallDelta(0, arguments="1}"),
        ToolCallDelta(1, id="b", name="g", arguments="{}"),
        Finish("tool_calls"),
    ]


def test_fold_tolerates_index_quirks_and_stop_after_tool_calls() -> None:
    events = _fold(
        [
            # Every call numbered 0 (distinct ids), then no index at all, parsed arguments.
            _chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}}
                    ]
                }
            ),
            _chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "b", "function": {"name": "g", "arguments": "{}"}}
                    ]
                }
            ),
            _chunk({"tool_calls": [{"id": "c", "function": {"name": "h", "arguments": {"k": 1}}}]}),
            _chunk(finish="stop"),
        ]
    )
    assert events == [
        ToolCallDelta(0, id="a", name="f", arguments="{}"),
        ToolCallDelta(1, id="b", name="g", arguments="{}"),
        ToolCallDelta(2, id="c", name="h", arguments='{"k": 1}'),
        Finish("tool_calls"),
    ]


@pytest.mark.parametrize(
    ("wire", "ours"),
    [("length", "length"), ("content_filter", "content_filter"), ("eos", "stop")],
)
def test_fold_finish_reasons_and_missing_usage(wire: str, ours: FinishReason) -> None:
    assert _fold([_chunk({"content": "x"}, finish=wire)]) == [TextDelta("x"), Finish(ours)]


def test_stream_without_finish_reason_is_dropped() -> None:
    state = ChatStreamState()
    state.fold(_chunk({"content": "partial"}))
    with pytest.raises(ProviderError) as caught:
        state.finish()
    assert caught.value.kind == "stream_dropped"


def test_non_streamed_json_reply_becomes_the_same_events() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2}
    body: dict[str, Any] = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "ok",
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": usage,
    }
    assert completion_events(body) == [
        TextDelta("ok"),
        ToolCallDelta(0, id="a", name="f", arguments="{}"),
        UsageEvent(Usage(input_tokens=3, output_tokens=2), raw=usage),
        Finish("tool_calls"),
    ]


def test_coalesced_joins_runs_of_one_kind_and_keeps_the_order() -> None:
    call = ToolCallDelta(index=0, id="c1", name="weather", arguments="{}")
    events: list[ProviderEvent] = [
        TextDelta("a"),
        TextDelta("b"),
        ReasoningDelta("r1"),
        ReasoningDelta("r2"),
        TextDelta("c"),
        call,
        TextDelta("d"),
        UsageEvent(Usage(input_tokens=1)),
        Finish("stop"),
    ]
    assert coalesced(events) == [
        TextDelta("ab"),
        ReasoningDelta("r1r2"),
        TextDelta("c"),
        call,
        TextDelta("d"),
        UsageEvent(Usage(input_tokens=1)),
        Finish("stop"),
    ]
    single = [TextDelta("only")]
    assert coalesced(single) is single
    assert coalesced([]) == []


def test_plain_events_come_as_their_bytes_and_the_rest_as_events() -> None:
    decoder = SSEDecoder()
    fed = decoder.feed_data(b'data: {"a":1}\n\nevent: error\ndata: {"b":2}\n\ndata: [DONE]\n\n')
    assert fed == [b'{"a":1}', SSEEvent('{"b":2}', event="error"), b"[DONE]"]
