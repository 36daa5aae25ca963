"""OpenAIChatProvider against canned loopback sockets in this process: local servers' quirks,
streams cut short, chunk coalescing, an unreachable upstream (the simulator cases are in
tests/e2e/test_provider_openai.py)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from app.providers.base import (
    Finish,
    ModelRequest,
    ProviderError,
    ProviderEvent,
    ReasoningDelta,
    SystemBlock,
    TextDelta,
    ToolCallDelta,
    UsageEvent,
    UserMessage,
)
from app.providers.openai_chat import OpenAIChatProvider
from app.providers.usage import Usage
from tests.support.provider_stream import stream_error

KEY = "sim-key-openai-0123456789"


def _request(*messages: Any, **fields: Any) -> ModelRequest:
    return ModelRequest(
        model="gpt-sim",
        system=fields.pop("system", (SystemBlock("Be brief."),)),
        messages=messages or (UserMessage("hello"),),
        **fields,
    )


async def test_unreachable_upstream_is_a_connection_error() -> None:
    adapter = OpenAIChatProvider("http://127.0.0.1:9/v1", KEY, timeout=5)
    try:
        error = await stream_error(adapter, _request())
    finally:
        await adapter.aclose()
    assert error.kind == "connection" and error.retryable


@asynccontextmanager
async def _canned_upstream(
    payload: bytes, content_type: bytes = b"text/event-stream"
) -> AsyncIterator[str]:
    """A real socket that answers any POST with exactly `payload`, then closes.

    For byte-level quirks of local servers (llama.cpp, Ollama, LM Studio) the simulator
    does not reproduce; the body is close-delimited, so ending it is a clean EOF.
    """

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"content-length:\s*(\d+)", head, re.IGNORECASE)
        await reader.readexactly(int(length.group(1)) if length else 0)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: " + content_type)
        writer.write(b"\r\nConnection: close\r\n\r\n" + payload)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}/v1"


def _sse(*chunks: dict[str, Any], newline: bytes = b"\n") -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + newline * 2 for c in chunks)


async def _events_from(base_url: str) -> list[ProviderEvent]:
    adapter = OpenAIChatProvider(base_url, None)
    try:
        return [event async for event in adapter.stream(_request())]
    finally:
        await adapter.aclose()


async def test_local_server_quirks_crlf_reasoning_field_no_usage_no_done() -> None:
    call = {"id": "c1", "function": {"name": "read_file", "arguments": {"path": "a"}}}
    payload = b": ping\r\n\r\n" + _sse(
        {"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning": "hm"}}]},
        {"choices": [{"index": 0, "delta": {"content": "Sure."}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        newline=b"\r\n",
    )
    async with _canned_upstream(payload) as base_url:
        events = await _events_from(base_url)
    assert events == [
        ReasoningDelta("hm"),
        TextDelta("Sure."),
        ToolCallDelta(0, id="c1", name="read_file", arguments='{"path": "a"}'),
        Finish("tool_calls"),
    ]


async def test_server_that_ignores_stream_true_and_answers_json() -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 1}
    reply = {
        "choices": [{"index": 0, "message": {"content": "whole"}, "finish_reason": "stop"}],
        "usage": usage,
    }
    async with _canned_upstream(json.dumps(reply).encode(), b"application/json") as base_url:
        events = await _events_from(base_url)
    assert events == [
        TextDelta("whole"),
        UsageEvent(Usage(input_tokens=5, output_tokens=1), raw=usage),
        Finish("stop"),
    ]


async def test_clean_eof_without_finish_reason_is_stream_dropped() -> None:
    payload = _sse({"choices": [{"index": 0, "delta": {"content": "half"}}]})
    async with _canned_upstream(payload) as base_url:
        with pytest.raises(ProviderError) as caught:
            await _events_from(base_url)
    assert caught.value.kind == "stream_dropped"


def _frame(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


WORDS = [f"w{i} " for i in range(10)]
FRAMES = [
    _frame({"reasoning_content": "think "}),
    _frame({"reasoning_content": "hard "}),
    *[_frame({"content": word}) for word in WORDS],
    _frame({}, "stop"),
    b"data: [DONE]\n\n",
]


@asynccontextmanager
async def _upstream(paced: bool) -> AsyncIterator[str]:
    """A loopback upstream streaming FRAMES as one chunked write, or one write per frame
    50 ms apart (`paced`)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: (\d+)", head)[1])  # type: ignore[index]
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        writer.write(b"transfer-encoding: chunked\r\n\r\n")
        for part in FRAMES if paced else [b"".join(FRAMES)]:
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
            if paced:
                await asyncio.sleep(0.05)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.close()


async def _streamed(*, paced: bool) -> list[ProviderEvent]:
    async with _upstream(paced=paced) as base_url:
        adapter = OpenAIChatProvider(base_url, KEY)
        try:
            return [event async for event in adapter.stream(_request())]
        finally:
            await adapter.aclose()


async def test_chunks_that_arrive_together_reach_the_turn_as_one_delta_each_kind() -> None:
    events = await _streamed(paced=False)
    assert events == [ReasoningDelta("think hard "), TextDelta("".join(WORDS)), Finish("stop")]


async def test_chunks_that_arrive_apart_are_not_held_back() -> None:
    events = await _streamed(paced=True)
    texts = [event.text for event in events if isinstance(event, TextDelta)]
    assert "".join(texts) == "".join(WORDS)
    assert len(texts) > 1  # each read on its own (a stalled loop may still join a few)
    assert events[-1] == Finish("stop")
