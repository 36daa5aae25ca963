"""The Anthropic wire's lean path (issue 10), against the upstream simulator.

The adapter used to call the SDK's typed `messages.create(stream=True)`; it now posts a
body it encoded itself (orjson, spliced from per-message fragments) and parses the raw
stream, on Courier's `LeanTransport` when the pool lends it a client. Held to the former
path (tests/support/sdk_reference.py): the same bytes upstream, the same events folded,
the same errors; and, over HTTP through the real server, one upstream connection reused.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, cast

import anthropic
import httpx
import httpx2
import pytest

import app.providers.anthropic as anthropic_wire
from app.providers.anthropic import AnthropicProvider, full_messages_body
from app.providers.base import (
    CONNECT_TIMEOUT_S,
    AssistantMessage,
    Message,
    ProviderEvent,
    UserMessage,
    coalesced,
)
from app.providers.clients import UpstreamClients
from tests.support.anthropic_requests import PIXEL, READ, REQUESTS, make_request
from tests.support.provider_stream import fold, stream_error
from tests.support.sdk_reference import sdk_typed_stream
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

KEY = "sim-key-anthropic-lean-0123456789"
# Headers the SDK sets per call or per client instance, not per path.
VARYING = {"x-stainless-retry-count", "x-stainless-read-timeout", "idempotency-key"}


@pytest.fixture
async def clients() -> AsyncIterator[UpstreamClients]:
    pool = UpstreamClients(max_connections=4)
    yield pool
    await pool.aclose()  # again, for a test that failed before closing it


async def _drain(events: AsyncIterator[ProviderEvent]) -> list[ProviderEvent]:
    return [event async for event in events]


def _last(sim: Simulator) -> dict[str, Any]:
    recorded = sim.requests()
    assert recorded[-1]["path"] == "/v1/messages"
    return recorded[-1]


@pytest.mark.parametrize("name", list(REQUESTS))
async def test_the_upstream_receives_the_bytes_the_typed_sdk_call_sent(
    sim: Simulator, clients: UpstreamClients, name: str
) -> None:
    request = REQUESTS[name]
    typed = anthropic.AsyncAnthropic(base_url=sim.base_url, api_key=KEY, max_retries=0)
    own = AnthropicProvider(sim.base_url, KEY)
    shared = AnthropicProvider(
        sim.base_url, KEY, http_client=clients.sdk_client_for_url(sim.base_url, timeout=600)
    )
    sim.script([{"reply": {"text": "ok"}}] * 3)
    seen: list[dict[str, Any]] = []
    try:
        for stream in (
            sdk_typed_stream(typed, request),
            own.stream(request),
            shared.stream(request),
        ):
            await _drain(stream)
            seen.append(_last(sim))
    finally:
        await typed.close()
        await own.aclose()
        await shared.aclose()
        await clients.aclose()
    former, *lean = seen
    for recorded in lean:
        assert recorded["body"] == former["body"]  # byte for byte (the recorder decodes UTF-8)
        headers = {k: v for k, v in recorded["headers"].items() if k not in VARYING}
        assert headers == {k: v for k, v in former["headers"].items() if k not in VARYING}
    assert former["body"].encode() == full_messages_body(request, default_max_tokens=8192)


async def test_a_keyless_gateway_gets_no_credentials_on_either_path(sim: Simulator) -> None:
    omit = cast(dict[str, str], {"Authorization": anthropic.Omit()})
    typed = anthropic.AsyncAnthropic(
        base_url=sim.base_url, api_key="", max_retries=0, default_headers=omit
    )
    keyless = AnthropicProvider(sim.base_url, None)
    try:
        # The simulator wants some key, so both answer 401; the request is recorded first.
        with pytest.raises(anthropic.AuthenticationError):
            await _drain(sdk_typed_stream(typed, make_request()))
        assert (await stream_error(keyless, make_request())).kind == "auth"
    finally:
        await typed.close()
        await keyless.aclose()
    former, lean = (r["headers"] for r in sim.requests("/v1/messages"))
    assert "authorization" not in lean
    assert {k: v for k, v in lean.items() if k not in VARYING} == {
        k: v for k, v in former.items() if k not in VARYING
    }


class _TimeoutRecorder(httpx2.AsyncBaseTransport):
    """httpx2's own transport, noting the timeout each request really carries."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.seen: list[dict[str, float | None]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.seen.append(request.extensions["timeout"])
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_connect_waits_seconds_not_the_whole_read_timeout(sim: Simulator) -> None:
    # A float timeout made the SDK wait the full 10 minutes on a host that never answers
    # the connect; the OpenAI wire already capped it. The retry layer needs it to fail fast.
    sim.script([{"reply": {"text": "hi"}}])
    recorder = _TimeoutRecorder()
    provider = AnthropicProvider(
        sim.base_url, KEY, timeout=600, http_client=httpx2.AsyncClient(transport=recorder)
    )
    try:
        await _drain(provider.stream(make_request()))
    finally:
        await provider.aclose()
    [timeout] = recorder.seen
    assert timeout["connect"] == CONNECT_TIMEOUT_S
    assert timeout["read"] == 600
    shared = UpstreamClients(max_connections=2)
    try:
        for client in (
            shared.for_url(sim.base_url, timeout=600),
            shared.sdk_client_for_url(sim.base_url, timeout=600),
        ):
            assert (client.timeout.connect, client.timeout.read) == (CONNECT_TIMEOUT_S, 600)
    finally:
        await shared.aclose()


async def test_markers_tools_system_and_images_arrive(sim: Simulator) -> None:
    provider = AnthropicProvider(sim.base_url, KEY)
    sim.script([{"reply": {"text": "ok"}}])
    try:
        await _drain(provider.stream(REQUESTS["everything"]))
    finally:
        await provider.aclose()
    body = json.loads(_last(sim)["body"])
    hour = {"type": "ephemeral", "ttl": "1h"}
    assert body["system"] == [
        {"type": "text", "text": "stable prompt " * 50, "cache_control": hour},
        {"type": "text", "text": "volatile"},
    ]
    assert body["tools"] == [
        {"name": "read_file", "description": "Read a file.", "input_schema": READ.parameters}
    ]
    assert body["tool_choice"] == {
        "type": "tool",
        "name": "read_file",
        "disable_parallel_tool_use": True,
    }
    first, second, third = body["messages"]
    assert first["content"][0] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PIXEL},
    }
    result, url_image = third["content"][0], third["content"][1]
    assert second["content"][1]["input"] == {"path": "a.txt"}
    assert result["cache_control"] == hour and result["tool_use_id"] == "toolu_1"
    assert url_image == {
        "type": "image",
        "source": {"type": "url", "url": "https://example.com/a.png"},
    }
    assert body["stream"] is True and body["max_tokens"] == 300


async def test_a_growing_conversation_encodes_only_its_new_messages(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[Message] = []
    real = anthropic_wire._message_blocks

    def counting(message: Message, ttl: str) -> bytes:
        encoded.append(message)
        return real(message, ttl)

    monkeypatch.setattr(anthropic_wire, "_message_blocks", counting)
    provider = AnthropicProvider(sim.base_url, KEY)
    history: tuple[Message, ...] = (UserMessage("q0"),)
    sim.script([{"reply": {"text": "ok"}}] * 4)
    try:
        for turn in range(4):
            request = make_request(*history, prompt_cache_key="session-growing")
            encoded.clear()
            await _drain(provider.stream(request))
            # The whole body still goes out, equal to a full encode (checked on every call
            # under COURIER_VERIFY_LIVE_LOG=1, as the suite runs, and here once more).
            assert _last(sim)["body"].encode() == full_messages_body(
                request, default_max_tokens=8192
            )
            assert len(encoded) == (1 if turn == 0 else 2)  # only the two new messages
            history += (AssistantMessage(f"a{turn}"), UserMessage(f"q{turn + 1}"))
    finally:
        await provider.aclose()


@pytest.mark.parametrize(
    "reply",
    [
        {"text": "one two three", "reasoning": "thinking it over"},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}, "id": "toolu_a"}]},
        {"text": "cut", "finish_reason": "max_tokens"},
    ],
)
async def test_events_fold_as_the_typed_sdk_events_did(
    sim: Simulator, clients: UpstreamClients, reply: dict[str, Any]
) -> None:
    typed = anthropic.AsyncAnthropic(base_url=sim.base_url, api_key=KEY, max_retries=0)
    shared = AnthropicProvider(
        sim.base_url, KEY, http_client=clients.sdk_client_for_url(sim.base_url, timeout=600)
    )
    sim.script([{"reply": reply}] * 2)
    try:
        former = await _drain(sdk_typed_stream(typed, make_request(tools=(READ,))))
        lean = await _drain(shared.stream(make_request(tools=(READ,))))
    finally:
        await typed.close()
        await clients.aclose()
    # The same events, but for text that arrived in one read, joined there (any runs a
    # read boundary left apart are joined here on both sides).
    assert coalesced(lean) == coalesced(former)
    assert fold(lean).finish is not None


@pytest.fixture
async def lean(sim: Simulator) -> AsyncIterator[AnthropicProvider]:
    pool = UpstreamClients(max_connections=4)
    yield AnthropicProvider(
        sim.base_url,
        KEY,
        timeout=1.0,
        http_client=pool.sdk_client_for_url(sim.base_url, timeout=1.0),
    )
    await pool.aclose()


@pytest.mark.parametrize(
    ("step", "kind"),
    [
        ({"fault": {"status": 429, "retry_after": 1}}, "rate_limited"),
        ({"fault": {"status": 529}}, "overloaded"),
        ({"fault": {"status": 500}}, "server_error"),
        (
            {"reply": {"text": "one two three"}, "fault": {"status": 529, "after_events": 4}},
            "overloaded",
        ),
        (
            {"reply": {"text": "a b c d e f g h"}, "fault": {"drop_after_events": 5}},
            "stream_dropped",
        ),
        (
            {"reply": {"text": "a b c"}, "fault": {"stall_after_events": 4, "stall_ms": 3000}},
            "timeout",
        ),
        ({"fault": {"delay_ms": 3000}, "reply": {"text": "late"}}, "timeout"),
    ],
    ids=["429", "529", "500", "error event", "dropped", "stalled mid-body", "slow headers"],
)
async def test_faults_on_the_lean_transport_map_as_on_the_sdks_own(
    sim: Simulator, lean: AnthropicProvider, step: dict[str, Any], kind: str
) -> None:
    sim.script([step])
    error = await stream_error(lean, make_request())
    assert error.kind == kind
    assert KEY not in str(error)
    assert len(sim.requests()) == 1  # the SDK's retries stay off


@pytest.mark.parametrize("garbled", [0, 3, 5])
async def test_a_garbled_stream_event_is_a_dropped_stream(
    sim: Simulator, clients: UpstreamClients, garbled: int
) -> None:
    shared = AnthropicProvider(
        sim.base_url, KEY, http_client=clients.sdk_client_for_url(sim.base_url, timeout=600)
    )
    sim.script([{"reply": {"text": "a b c d e f"}, "fault": {"garble_event": garbled}}])
    try:
        error = await stream_error(shared, make_request())
    finally:
        await clients.aclose()
    assert (error.kind, error.should_fall_back) == ("stream_dropped", True)
    assert "unparseable" in error.message


@pytest.fixture(scope="module")
def anthropic_server(module_servers: ServerFactory) -> Server:
    return module_servers("anthropic")


def _chat(server: Server, text: str, **extra: Any) -> httpx.Response:
    body = {"model": "courier", "messages": [{"role": "user", "content": text}], **extra}
    return httpx.post(
        f"{server.base_url}/v1/chat/completions", json=body, headers=server.headers(), timeout=60
    )


def test_calls_on_the_anthropic_wire_reuse_one_upstream_connection(
    anthropic_server: Server, sim: Simulator
) -> None:
    sim.script([{"reply": {"text": f"answer {i}"}} for i in range(6)])
    for i in range(6):
        resp = _chat(anthropic_server, f"reuse {i}", stream=i % 2 == 0)
        assert resp.status_code == 200, resp.text
    assert len(sim.requests("/v1/messages")) == 6
    assert sim.connections() == 1


def test_markers_tools_system_and_images_arrive_through_the_server(
    anthropic_server: Server, sim: Simulator
) -> None:
    sim.script([{"reply": {"text": "a picture"}}, {"reply": {"text": "still a picture"}}])
    lookup = {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up a word.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    picture = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse. " * 100},
        {"role": "user", "content": [{"type": "text", "text": "what is this?"}, picture]},
    ]
    resp = _chat_messages(anthropic_server, messages, tools=[lookup])
    assert resp.status_code == 200, resp.text
    messages += [
        {"role": "assistant", "content": "a picture"},
        {"role": "user", "content": "sure?"},
    ]
    sid = resp.headers["x-session-id"]
    again = _chat_messages(anthropic_server, messages, tools=[lookup], session=sid)
    assert again.status_code == 200, again.text
    first, second = (json.loads(r["body"]) for r in sim.requests("/v1/messages"))
    for body in (first, second):
        marked = [block for block in body["system"] if "cache_control" in block]
        assert len(marked) == len(body["system"]) == 2  # Courier's prompt, then the client's
        assert body["system"][1]["text"].startswith("You are terse. " * 99)
        [tool] = [tool for tool in body["tools"] if tool["name"] == "lookup"]
        assert tool["input_schema"] == lookup["function"]["parameters"]  # type: ignore[index]
        image, text = body["messages"][0]["content"][:2]
        assert image["source"] == {"type": "base64", "media_type": "image/png", "data": PIXEL}
        assert text["text"] == "what is this?"
    # Each call marks its newest user turn (the second one spliced from kept fragments).
    assert "cache_control" in first["messages"][-1]["content"][-1]
    assert "cache_control" in second["messages"][-1]["content"][-1]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]


def _chat_messages(
    server: Server, messages: list[dict[str, Any]], *, session: str | None = None, **extra: Any
) -> httpx.Response:
    headers = server.headers(**({"X-Session-Id": session} if session else {}))
    body = {"model": "courier", "messages": messages, **extra}
    return httpx.post(
        f"{server.base_url}/v1/chat/completions", json=body, headers=headers, timeout=60
    )


def test_a_garbled_event_ends_the_turn_as_a_dropped_stream_not_our_bug(
    anthropic_server: Server, sim: Simulator
) -> None:
    garbled = {"reply": {"text": "a b c d"}, "fault": {"garble_event": 0}}
    sim.script([garbled])
    resp = _chat(anthropic_server, "garbled upstream")
    # Before, the SDK's JSON error escaped the adapter: a 500 internal_error, our "bug".
    assert resp.status_code == 502, resp.text
    assert resp.json()["error"]["code"] == "upstream_stream_dropped"
    assert len(sim.requests("/v1/messages")) == 1
    sid = resp.headers["x-session-id"]
    turns = httpx.get(
        f"{anthropic_server.base_url}/v1/sessions/{sid}/turns", headers=anthropic_server.headers()
    ).json()["data"]
    assert [(t["exit_reason"], t["error"]) for t in turns] == [
        ("upstream_error", "upstream_stream_dropped")
    ]
