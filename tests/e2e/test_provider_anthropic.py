"""AnthropicProvider (official SDK) over real HTTP against the upstream simulator."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.providers.anthropic import AnthropicProvider
from app.providers.base import (
    AssistantMessage,
    Finish,
    FinishReason,
    ModelRequest,
    ProviderError,
    ProviderEvent,
    SamplingParams,
    SystemBlock,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from app.providers.factory import build_provider
from app.providers.retry import stream_with_retry
from tests.support.provider_stream import fold, run, stream_error
from tests.support.sim import Simulator

KEY = "sim-key-anthropic-0123456789"
READ = ToolSpec(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
LONG_SYSTEM = "You are a careful assistant who reads files before answering. " * 200


@pytest.fixture
async def provider(sim: Simulator) -> AsyncIterator[AnthropicProvider]:
    adapter = AnthropicProvider(sim.base_url, KEY, default_max_tokens=512)
    yield adapter
    await adapter.aclose()


def _request(*messages: Any, **fields: Any) -> ModelRequest:
    return ModelRequest(
        model="claude-sim",
        system=fields.pop("system", (SystemBlock("Be brief."),)),
        messages=messages or (UserMessage("hello"),),
        **fields,
    )


def _body(sim: Simulator) -> dict[str, Any]:
    recorded = sim.requests()
    assert recorded[-1]["path"] == "/v1/messages"
    body: dict[str, Any] = json.loads(recorded[-1]["body"])
    return body


async def test_text_and_thinking_stream_with_sampling_in_the_body(
    sim: Simulator, provider: AnthropicProvider
) -> None:
    sim.configure(tokens_per_second=50)  # paced, so the deltas arrive apart
    sim.script(
        [
            {
                "expect": {"last_user_contains": "hello", "max_tokens": 77, "temperature": 0.25},
                "reply": {"reasoning": "They greet me.", "text": "Hello there, how are you?"},
            }
        ]
    )
    request = _request(
        sampling=SamplingParams(temperature=0.25, top_p=0.5, stop=("STOP",), max_tokens=77)
    )
    reply = await run(provider, request)
    sim.assert_script_done()
    assert (reply.reasoning, reply.text, reply.finish) == (
        "They greet me.",
        "Hello there, how are you?",
        "stop",
    )
    assert sum(isinstance(e, TextDelta) for e in reply.events) > 1
    assert reply.usage is not None and reply.usage.input_tokens > 0
    # Final output count comes from message_delta, input from message_start.
    assert reply.usage.output_tokens == reply.raw_usage["output_tokens"] > 1
    assert _body(sim) == {
        "model": "claude-sim",
        "max_tokens": 77,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
        "system": [{"type": "text", "text": "Be brief."}],
        "stop_sequences": ["STOP"],
        "temperature": 0.25,
        "top_p": 0.5,
        "stream": True,
    }


async def test_default_max_tokens_when_unset(sim: Simulator, provider: AnthropicProvider) -> None:
    sim.script([{"expect": {"max_tokens": 512}, "reply": {"text": "ok"}}])
    await run(provider, _request())
    sim.assert_script_done()


async def test_tool_call_fragments_reassemble(sim: Simulator, provider: AnthropicProvider) -> None:
    long_path = "src/" + "deeply/nested/" * 10 + "module.py"
    sim.script(
        [
            {
                "expect": {"has_tools": True},
                "reply": {
                    "text": "Let me look.",
                    "tool_calls": [
                        {"name": "read_file", "arguments": {"path": long_path}},
                        {"name": "read_file", "arguments": {"path": "b.txt"}},
                    ],
                },
            }
        ]
    )
    reply = await run(provider, _request(tools=(READ,)))
    sim.assert_script_done()
    assert (reply.text, reply.finish) == ("Let me look.", "tool_calls")
    assert sorted(reply.calls) == [0, 1]
    assert [json.loads(call["arguments"]) for call in reply.calls.values()] == [
        {"path": long_path},
        {"path": "b.txt"},
    ]
    assert all(call["name"] == "read_file" and call["id"] for call in reply.calls.values())
    fragments = [e for e in reply.events if isinstance(e, ToolCallDelta) and e.index == 0]
    assert len([f for f in fragments if f.arguments]) > 1
    assert _body(sim)["tools"] == [
        {"name": "read_file", "description": "Read a file.", "input_schema": READ.parameters}
    ]


async def test_consecutive_tool_results_share_one_user_turn(
    sim: Simulator, provider: AnthropicProvider
) -> None:
    sim.script([{"expect": {"last_user_contains": "now summarise"}, "reply": {"text": "Summary."}}])
    request = _request(
        UserMessage("read a and b"),
        AssistantMessage(
            "Reading both.",
            (
                ToolCall("toolu_a", "read_file", '{"path":"a"}'),
                ToolCall("toolu_b", "read_file", '{"path":"b"}'),
            ),
        ),
        ToolResultMessage("toolu_a", "read_file", "contents of a"),
        ToolResultMessage("toolu_b", "read_file", "no such file", is_error=True),
        UserMessage("now summarise"),
        tools=(READ,),
    )
    assert (await run(provider, request)).text == "Summary."
    sim.assert_script_done()
    assert _body(sim)["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "read a and b"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading both."},
                {"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_b", "name": "read_file", "input": {"path": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "contents of a"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": "no such file",
                    "is_error": True,
                },
                {"type": "text", "text": "now summarise"},
            ],
        },
    ]


@pytest.mark.parametrize(
    ("scripted", "finish"),
    [("max_tokens", "length"), ("refusal", "content_filter"), ("stop_sequence", "stop")],
)
async def test_stop_reasons(
    sim: Simulator, provider: AnthropicProvider, scripted: str, finish: FinishReason
) -> None:
    sim.script([{"reply": {"text": "cut short", "finish_reason": scripted}}])
    assert (await run(provider, _request())).finish == finish


async def test_cache_markers_write_then_read(sim: Simulator, provider: AnthropicProvider) -> None:
    sim.script([{"reply": {"text": "one"}}, {"reply": {"text": "two"}}])
    request = _request(
        UserMessage("question", cache=True),
        system=(SystemBlock(LONG_SYSTEM, cache=True), SystemBlock("Today is day 1.")),
        cache_ttl="1h",
    )
    first = await run(provider, request)
    second = await run(provider, request)
    sim.assert_script_done()
    assert first.usage is not None and second.usage is not None
    assert first.usage.cache_write_tokens > 0 and first.usage.cache_read_tokens == 0
    assert first.raw_usage["cache_creation"]["ephemeral_1h_input_tokens"] > 0
    assert second.usage.cache_read_tokens == first.usage.cache_write_tokens
    assert second.usage.cache_write_tokens == 0
    assert second.usage.prompt_tokens == first.usage.prompt_tokens
    one_hour = {"type": "ephemeral", "ttl": "1h"}
    body = _body(sim)
    assert body["system"] == [
        {"type": "text", "text": LONG_SYSTEM, "cache_control": one_hour},
        {"type": "text", "text": "Today is day 1."},
    ]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "question", "cache_control": one_hour}],
        }
    ]


async def test_rate_limit_with_retry_after(sim: Simulator, provider: AnthropicProvider) -> None:
    sim.script([{"fault": {"status": 429, "retry_after": 1}}])
    error = await stream_error(provider, _request())
    assert (error.kind, error.status, error.retry_after, error.retryable) == (
        "rate_limited",
        429,
        1.0,
        True,
    )
    assert len(sim.requests()) == 1  # the SDK's own retries are off


@pytest.mark.parametrize(("status", "kind"), [(529, "overloaded"), (500, "server_error")])
async def test_server_faults(
    sim: Simulator, provider: AnthropicProvider, status: int, kind: str
) -> None:
    sim.script([{"fault": {"status": status}}])
    error = await stream_error(provider, _request())
    assert (error.kind, error.status, error.retryable) == (kind, status, True)
    assert len(sim.requests()) == 1


async def test_overloaded_event_inside_the_stream(
    sim: Simulator, provider: AnthropicProvider
) -> None:
    sim.script([{"reply": {"text": "one two three"}, "fault": {"status": 529, "after_events": 4}}])
    error = await stream_error(provider, _request())
    assert (error.kind, error.retryable) == ("overloaded", True)


async def test_dropped_connection_is_stream_dropped(
    sim: Simulator, provider: AnthropicProvider
) -> None:
    sim.script([{"reply": {"text": "a b c d e f g h"}, "fault": {"drop_after_events": 5}}])
    seen: list[ProviderEvent] = []
    with pytest.raises(ProviderError) as caught:
        async for event in provider.stream(_request()):
            seen.append(event)
    assert caught.value.kind == "stream_dropped"
    assert seen and not any(isinstance(e, Finish) for e in seen)


async def test_context_overflow(sim: Simulator, provider: AnthropicProvider) -> None:
    sim.configure(context_window=100)
    error = await stream_error(provider, _request(system=(SystemBlock(LONG_SYSTEM),)))
    assert (error.kind, error.status, error.should_compress, error.retryable) == (
        "context_overflow",
        400,
        True,
        False,
    )
    assert "prompt is too long" in error.message


async def test_bad_key_is_auth_and_never_echoed(sim: Simulator) -> None:
    sim.configure(required_key="the-right-key-000000")
    wrong = "sim-wrong-key-999999999"
    adapter = build_provider("anthropic", base_url=sim.base_url, api_key=wrong)
    try:
        error = await stream_error(adapter, _request())
    finally:
        await adapter.aclose()
    assert (error.kind, error.status) == ("auth", 401)
    assert wrong not in error.message and wrong not in str(error)


async def test_stream_with_retry_recovers_from_a_429(
    sim: Simulator, provider: AnthropicProvider
) -> None:
    sim.script([{"fault": {"status": 429, "retry_after": 1}}, {"reply": {"text": "recovered"}}])
    sleeps: list[float] = []

    async def no_wait(delay: float) -> None:
        sleeps.append(delay)

    events = [e async for e in stream_with_retry(provider, _request(), sleep=no_wait)]
    sim.assert_script_done()
    assert fold(events).text == "recovered"
    assert sleeps == [1.0]
    assert len(sim.requests()) == 2
