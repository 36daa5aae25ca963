"""The Anthropic wire's lean path (issue 10), in-process: the body encoder and its
remembered fragments, the event decoder, and the transport errors' meaning under httpx2.

The adapter used to call the SDK's typed `messages.create(stream=True)`; it now posts a
body it encoded itself (orjson, spliced from per-message fragments) and parses the raw
stream. Held to the former path here without a network; against the simulator and a real
server in tests/e2e/test_anthropic_lean_wire.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import httpx
import httpx2
import pytest

import app.providers.anthropic as anthropic_wire
from app.providers.anthropic import AnthropicProvider, encode_messages_body, full_messages_body
from app.providers.base import (
    AssistantMessage,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from app.providers.clients import UpstreamClients
from app.providers.messages_sse import MessagesEventDecoder
from app.providers.sdk_transport import _as_httpx2
from app.providers.sse_decoder import SSEDecoder
from app.security.outbound import NO_SCAN
from tests.support.anthropic_requests import REQUESTS, make_request
from tests.support.provider_stream import stream_error

KEY = "sim-key-anthropic-lean-0123456789"


def test_a_shorter_conversation_with_the_same_start_is_encoded_right() -> None:
    messages = REQUESTS["everything"].messages
    full = replace(REQUESTS["everything"], prompt_cache_key="session-shorter")
    assert encode_messages_body(full) == full_messages_body(full)
    for cut in range(len(messages) - 1, -1, -1):
        shorter = replace(full, messages=messages[:cut])
        assert encode_messages_body(shorter) == full_messages_body(shorter), cut


def test_an_exotic_schema_or_argument_falls_back_to_the_full_encoder() -> None:
    # orjson refuses integers past 64 bits; the stdlib encoder does not.
    huge = ToolSpec("t", "d", {"type": "integer", "maximum": 2**70})
    request = make_request(tools=(huge,))
    assert encode_messages_body(request) == full_messages_body(request)
    assert b"1180591620717411303424" in encode_messages_body(request)
    call = AssistantMessage("", (ToolCall("toolu_big", "t", f'{{"n": {2**70}}}'),))
    request = make_request(UserMessage("hi"), call, ToolResultMessage("toolu_big", "t", "ok"))
    assert encode_messages_body(request) == full_messages_body(request)


def test_a_corrupted_remembered_encoding_is_caught() -> None:
    request = make_request(
        UserMessage("first"),
        AssistantMessage("second"),
        UserMessage("third"),
        prompt_cache_key="session-tampered",
    )
    body = encode_messages_body(request)
    anthropic_wire._check_body(request, body, default_max_tokens=8192)
    parts = anthropic_wire._FRAGMENTS._kept[("session-tampered", "5m", NO_SCAN.serial)][1]
    parts[1] = b'{"type":"text","text":"tampered"}'
    tampered = encode_messages_body(request)
    assert b"tampered" in tampered
    with pytest.raises(AssertionError, match="differs from a full encode"):
        anthropic_wire._check_body(request, tampered, default_max_tokens=8192)


async def test_an_unreachable_upstream_is_a_connection_error_on_the_lean_transport() -> None:
    pool = UpstreamClients(max_connections=2)
    adapter = AnthropicProvider(
        "http://127.0.0.1:9",
        KEY,
        http_client=pool.sdk_client_for_url("http://127.0.0.1:9", timeout=5),
    )
    try:
        error = await stream_error(adapter, make_request())
    finally:
        await pool.aclose()
    assert error.kind == "connection" and error.retryable


STREAM = (
    b'event: message_start\ndata: {"type":"message_start"}\n\n'
    b": a comment\n\n"
    b'event: ping\ndata: {"type":"ping"}\n\n'
    b'event: content_block_delta\ndata: {"a":\ndata: "b"}\n\n'
    b'data: {"unnamed":1}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}'
)


def _general(raw: bytes, cut: int) -> list[tuple[str | None, Any]]:
    decoder = SSEDecoder()
    events = decoder.feed(raw[:cut]) + decoder.feed(raw[cut:]) + decoder.close()
    return [(e.event, json.loads(e.data)) for e in events]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("bom", [b"", "\ufeff".encode()])
def test_the_event_decoder_reads_what_the_general_one_reads(newline: bytes, bom: bytes) -> None:
    raw = bom + STREAM.replace(b"\n", newline)
    for cut in range(len(raw) + 1):
        decoder = MessagesEventDecoder()
        events = decoder.feed(raw[:cut]) + decoder.feed(raw[cut:]) + decoder.close()
        assert [(name, json.loads(data)) for name, data in events] == _general(raw, cut), cut


def _transport_errors(root: type) -> list[type]:
    found = [root]
    for sub in root.__subclasses__():
        found += _transport_errors(sub)
    return found


@pytest.mark.parametrize("kind", _transport_errors(httpx.TransportError), ids=lambda k: k.__name__)
def test_every_httpx_transport_error_keeps_its_meaning_under_httpx2(kind: type) -> None:
    # The SDK maps httpx2.TimeoutException to its timeout error and the rest to a
    # connection error; a class renamed to a parent would turn a timeout into a fault.
    request = httpx2.Request("POST", "http://127.0.0.1/v1/messages")
    renamed = _as_httpx2(kind("boom"), request)
    assert type(renamed).__name__ == kind.__name__
    assert isinstance(renamed, httpx2.TimeoutException) == issubclass(kind, httpx.TimeoutException)
    assert renamed.request is request and str(renamed) == "boom"


def test_the_off_loop_gate_counts_what_the_next_call_must_encode() -> None:
    history = tuple(UserMessage(f"m{i}") for i in range(300))
    request = make_request(*history, prompt_cache_key="session-gate")
    key = anthropic_wire._fragment_key(request, NO_SCAN)
    assert anthropic_wire._FRAGMENTS.unencoded(history, key) == 300  # never encoded
    encode_messages_body(request)
    grown = (*history, AssistantMessage("a"), UserMessage("q"))
    assert anthropic_wire._FRAGMENTS.unencoded(grown, key) == 2
    rebuilt = tuple(UserMessage(m.content) for m in history)  # a rebuilt projection
    assert anthropic_wire._FRAGMENTS.unencoded(rebuilt, key) == 300
