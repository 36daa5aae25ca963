"""OpenAIChatProvider over real HTTP against the upstream simulator (a subprocess)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

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
from app.providers.openai_chat import OpenAIChatProvider
from app.providers.retry import stream_with_retry
from tests.support.provider_stream import fold, run, stream_error
from tests.support.sim import Simulator

KEY = "sim-key-openai-0123456789"
READ = ToolSpec(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
LONG_SYSTEM = "You are a careful assistant who reads files before answering. " * 200


@pytest.fixture
async def provider(sim: Simulator) -> AsyncIterator[OpenAIChatProvider]:
    adapter = OpenAIChatProvider(f"{sim.base_url}/v1", KEY)
    yield adapter
    await adapter.aclose()


def _request(*messages: Any, **fields: Any) -> ModelRequest:
    return ModelRequest(
        model="gpt-sim",
        system=fields.pop("system", (SystemBlock("Be brief."),)),
        messages=messages or (UserMessage("hello"),),
        **fields,
    )


def _body(sim: Simulator) -> dict[str, Any]:
    recorded = sim.requests()
    assert recorded[-1]["path"] == "/v1/chat/completions"
    body: dict[str, Any] = json.loads(recorded[-1]["body"])
    return body


async def test_text_and_reasoning_stream_with_sampling_in_the_body(
    sim: Simulator, provider: OpenAIChatProvider
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
    assert sum(isinstance(e, TextDelta) for e in reply.events) > 1  # really streamed
    assert reply.usage is not None and reply.usage.output_tokens > 0
    assert reply.usage.input_tokens > 0
    assert _body(sim) == {
        "model": "gpt-sim",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello"},
        ],
        "temperature": 0.25,
        "top_p": 0.5,
        "stop": ["STOP"],
        "max_tokens": 77,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert sim.requests()[-1]["headers"]["authorization"] == f"Bearer {KEY}"


async def test_tool_call_fragments_reassemble(sim: Simulator, provider: OpenAIChatProvider) -> None:
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
    assert reply.finish == "tool_calls"
    assert sorted(reply.calls) == [0, 1]
    assert [json.loads(call["arguments"]) for call in reply.calls.values()] == [
        {"path": long_path},
        {"path": "b.txt"},
    ]
    assert all(call["name"] == "read_file" and call["id"] for call in reply.calls.values())
    assert reply.calls[0]["id"] != reply.calls[1]["id"]
    fragments = [e for e in reply.events if isinstance(e, ToolCallDelta) and e.index == 0]
    assert len([f for f in fragments if f.arguments]) > 1  # arguments arrived in pieces
    assert _body(sim)["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file.",
                "parameters": READ.parameters,
            },
        }
    ]


async def test_history_with_tool_calls_and_results_on_the_wire(
    sim: Simulator, provider: OpenAIChatProvider
) -> None:
    sim.script(
        [{"expect": {"last_tool_result_contains": "contents of a"}, "reply": {"text": "Done."}}]
    )
    request = _request(
        UserMessage("read a"),
        AssistantMessage(None, (ToolCall("call_a", "read_file", '{"path":"a"}'),)),
        ToolResultMessage("call_a", "read_file", "contents of a"),
        tools=(READ,),
    )
    assert (await run(provider, request)).text == "Done."
    sim.assert_script_done()
    assert _body(sim)["messages"][1:] == [
        {"role": "user", "content": "read a"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path":"a"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "contents of a"},
    ]


@pytest.mark.parametrize("finish", ["length", "content_filter"])
async def test_finish_reasons(
    sim: Simulator, provider: OpenAIChatProvider, finish: FinishReason
) -> None:
    sim.script([{"reply": {"text": "cut short", "finish_reason": finish}}])
    assert (await run(provider, _request())).finish == finish


async def test_usage_reports_cache_reads_on_the_second_identical_call(
    sim: Simulator, provider: OpenAIChatProvider
) -> None:
    sim.script([{"reply": {"text": "one"}}, {"reply": {"text": "two"}}])
    request = _request(system=(SystemBlock(LONG_SYSTEM),), prompt_cache_key="session-42")
    first = (await run(provider, request)).usage
    second = (await run(provider, request)).usage
    sim.assert_script_done()
    assert first is not None and second is not None
    assert first.cache_read_tokens == 0
    assert second.cache_read_tokens > 0
    # Disjoint buckets: the same prompt, split differently between fresh and cached.
    assert second.prompt_tokens == first.prompt_tokens
    assert second.input_tokens == first.prompt_tokens - second.cache_read_tokens
    body = _body(sim)
    assert body["prompt_cache_key"] == "session-42"
    assert "cache_control" not in json.dumps(body)


async def test_cache_markers_for_envelope_routes(sim: Simulator) -> None:
    sim.script([{"reply": {"text": "ok"}}])
    adapter = build_provider(
        "openai", base_url=f"{sim.base_url}/v1", api_key=KEY, cache_markers=True
    )
    request = _request(
        UserMessage("first", cache=True),
        AssistantMessage("answer"),
        UserMessage("second"),
        system=(SystemBlock("stable", cache=True), SystemBlock("volatile")),
        cache_ttl="1h",
    )
    try:
        async for _ in adapter.stream(request):
            pass
    finally:
        await adapter.aclose()
    marker = {"type": "ephemeral", "ttl": "1h"}
    assert _body(sim)["messages"] == [
        {
            "role": "system",
            "content": [
                {"type": "text", "text": "stable", "cache_control": marker},
                {"type": "text", "text": "volatile"},
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "first", "cache_control": marker}]},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "second"},
    ]


async def test_rate_limit_with_retry_after(sim: Simulator, provider: OpenAIChatProvider) -> None:
    sim.script([{"fault": {"status": 429, "retry_after": 1}}])
    error = await stream_error(provider, _request())
    assert (error.kind, error.status, error.retry_after, error.retryable) == (
        "rate_limited",
        429,
        1.0,
        True,
    )


@pytest.mark.parametrize(("status", "kind"), [(529, "overloaded"), (500, "server_error")])
async def test_server_faults(
    sim: Simulator, provider: OpenAIChatProvider, status: int, kind: str
) -> None:
    sim.script([{"fault": {"status": status}}])
    error = await stream_error(provider, _request())
    assert (error.kind, error.status, error.retryable) == (kind, status, True)


async def test_error_inside_the_stream(sim: Simulator, provider: OpenAIChatProvider) -> None:
    sim.script([{"reply": {"text": "one two three"}, "fault": {"status": 529, "after_events": 2}}])
    with pytest.raises(ProviderError) as caught:
        async for _ in provider.stream(_request()):
            pass
    assert caught.value.kind == "overloaded"


async def test_dropped_connection_is_stream_dropped(
    sim: Simulator, provider: OpenAIChatProvider
) -> None:
    sim.script([{"reply": {"text": "a b c d e f g h"}, "fault": {"drop_after_events": 3}}])
    seen: list[ProviderEvent] = []
    with pytest.raises(ProviderError) as caught:
        async for event in provider.stream(_request()):
            seen.append(event)
    assert caught.value.kind == "stream_dropped"
    assert not any(isinstance(e, Finish) for e in seen)


async def test_context_overflow(sim: Simulator, provider: OpenAIChatProvider) -> None:
    sim.configure(context_window=100)
    error = await stream_error(provider, _request(system=(SystemBlock(LONG_SYSTEM),)))
    assert (error.kind, error.status, error.should_compress, error.retryable) == (
        "context_overflow",
        400,
        True,
        False,
    )


async def test_bad_key_is_auth_and_never_echoed(sim: Simulator) -> None:
    sim.configure(required_key="the-right-key-000000")
    wrong = "sim-wrong-key-999999999"
    adapter = OpenAIChatProvider(f"{sim.base_url}/v1", wrong)
    try:
        error = await stream_error(adapter, _request())
    finally:
        await adapter.aclose()
    assert (error.kind, error.status) == ("auth", 401)
    assert wrong not in error.message and wrong not in str(error)


async def test_stream_with_retry_recovers_from_a_429(
    sim: Simulator, provider: OpenAIChatProvider
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


async def test_stream_with_retry_never_repeats_partial_output(
    sim: Simulator, provider: OpenAIChatProvider
) -> None:
    sim.script([{"reply": {"text": "one two three"}, "fault": {"status": 500, "after_events": 2}}])
    sleeps: list[float] = []

    async def no_wait(delay: float) -> None:
        sleeps.append(delay)

    seen: list[ProviderEvent] = []
    with pytest.raises(ProviderError) as caught:
        async for event in stream_with_retry(provider, _request(), sleep=no_wait):
            seen.append(event)
    sim.assert_script_done()
    assert caught.value.kind == "server_error" and caught.value.retryable
    assert seen and sleeps == [] and len(sim.requests()) == 1
