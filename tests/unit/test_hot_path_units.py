"""The hot path's shortcuts produce exactly the bytes of the slow paths they replace."""

from __future__ import annotations

import json

import pytest

from app.agent.turns.handle import TurnHandle
from app.api.chat.render import ChunkChoice, CompletionRenderer, Delta
from app.api.http.sse import ServerSentEvent
from app.providers.openai_chat import OpenAIChatProvider
from app.tools.registry import Tool, ToolRegistry

TRICKY = ["hi", "", 'quote " backslash \\ newline \n tab \t', "\u2028\u2029 é 😀 \x01 \x00", "}]"]
TRICKY += ["\x7f \x1f \x08 \x0c \r", "\ud800 a lone surrogate"]  # the last: json's path


@pytest.mark.parametrize("include_usage", [False, True])
def test_templated_text_chunks_match_the_rendered_model(include_usage: bool) -> None:
    renderer = CompletionRenderer('a "model"\n', include_usage=include_usage)
    for text in TRICKY:
        slow = renderer._chunk([ChunkChoice(delta=Delta(content=text))])
        assert renderer.text_chunk(text) == slow


@pytest.mark.parametrize("include_usage", [False, True])
def test_text_frames_in_bytes_match_the_encoded_event(include_usage: bool) -> None:
    renderer = CompletionRenderer('a "model"\n', include_usage=include_usage)
    for text in TRICKY[:-1]:
        assert renderer.text_sse(text) == ServerSentEvent(data=renderer.text_chunk(text)).encode()
    # A lone surrogate has no UTF-8 form: escaped, the frame still parses to the same text.
    frame = renderer.text_sse(TRICKY[-1])
    assert frame.startswith(b"data: ") and frame.endswith(b"\r\n\r\n")
    assert json.loads(frame[6:-4])["choices"][0]["delta"]["content"] == TRICKY[-1]
    handle = TurnHandle("turn_x", "sess_x")
    handle.completion_id, handle.created = "chatcmpl-reattached", 1234
    renderer.adopt(handle)
    again = renderer.text_sse("again")
    assert b'"id":"chatcmpl-reattached"' in again
    assert again == ServerSentEvent(data=renderer.text_chunk("again")).encode()


@pytest.mark.parametrize("model", ['a "model"\n', "gpt-4o", "é😀", "m" * 300, "2021"])
@pytest.mark.parametrize("include_usage", [False, True])
def test_kept_frame_templates_match_the_rendered_models(model: str, include_usage: bool) -> None:
    """Role and finish frames come from per-model templates cut around id and created;
    the bytes must be those of rendering the models, for any model name and identity."""
    from app.agent.events import TurnFinished
    from app.providers.pricing import Cost
    from app.providers.usage import Usage

    for created in (0, 1_700_000_000, 2021):
        renderer = CompletionRenderer(model, include_usage=include_usage)
        renderer.created = created
        assert renderer.role_chunk() == renderer._chunk(
            [ChunkChoice(delta=Delta(role="assistant", content=""))]
        )
        for reason in ("stop", "length", "tool_calls", "content_filter"):
            finished = TurnFinished("completed", reason, Usage(), Cost.zero(), 1)
            slow = renderer._chunk([ChunkChoice(delta=Delta(), finish_reason=reason)])
            assert renderer.finish_chunk(finished) == slow
        for text in TRICKY[:3]:
            assert renderer.text_chunk(text) == renderer._chunk(
                [ChunkChoice(delta=Delta(content=text))]
            )


def test_templates_kept_are_bounded_and_long_model_names_are_not_kept() -> None:
    from app.api.chat import render

    render._FRAMES.clear()
    CompletionRenderer("m" * (render.TEMPLATED_MODEL_CHARS + 1)).role_chunk()
    assert not render._FRAMES
    for i in range(render._FRAMES_KEPT + 5):
        CompletionRenderer(f"model-{i}").role_chunk()
    assert 0 < len(render._FRAMES) <= render._FRAMES_KEPT


def test_an_adopted_identity_renews_the_template() -> None:
    first = CompletionRenderer("m")
    first.text_chunk("warm the template")
    handle = TurnHandle("turn_x", "sess_x")
    handle.completion_id, handle.created = "chatcmpl-reattached", 1234
    first.adopt(handle)
    chunk = first.text_chunk("again")
    assert '"id":"chatcmpl-reattached"' in chunk and '"created":1234' in chunk
    assert chunk == first._chunk([ChunkChoice(delta=Delta(content="again"))])


@pytest.mark.parametrize(
    ("fields", "encoded"),
    [
        ({"data": '{"a":1}'}, b'data: {"a":1}\r\n\r\n'),
        ({"data": "[DONE]"}, b"data: [DONE]\r\n\r\n"),
        (
            {"data": "two\nlines\r\nand\rmore"},
            b"data: two\r\ndata: lines\r\ndata: and\r\ndata: more\r\n\r\n",
        ),
        ({"comment": "keepalive"}, b": keepalive\r\n\r\n"),
        (
            {"event": "courier.tool", "data": '{"name":"x"}'},
            b'event: courier.tool\r\ndata: {"name":"x"}\r\n\r\n',
        ),
        ({"data": ""}, b"data: \r\n\r\n"),
        ({"id": "7", "event": "text", "data": "{}"}, b"id: 7\r\nevent: text\r\ndata: {}\r\n\r\n"),
        (
            {"id": "1\n2", "comment": "a\nb", "event": "e\rx", "data": "d"},
            b": a\r\n: b\r\nid: 12\r\nevent: ex\r\ndata: d\r\n\r\n",
        ),
    ],
)
def test_frames_encode_like_sse_starlette(fields: dict[str, str], encoded: bytes) -> None:
    # The bytes sse-starlette 3.7.0 wrote for these frames, when it served two of the
    # three streams: no client may see a change now that one response serves all three.
    assert ServerSentEvent(**fields).encode() == encoded


async def _noop(_args: dict[str, object], _ctx: object) -> str:
    return ""


def test_a_restricted_registry_resolves_only_its_names() -> None:
    tools = [Tool(name=n, description=n, parameters={}, handler=_noop) for n in ("a", "b", "c")]
    registry = ToolRegistry(tools)
    view = registry.restricted_to(["a", "c", "not-registered"])
    assert view.names() == ["a", "c"]
    assert view.get("b") is None and registry.get("b") is not None
    assert view.availability is registry.availability


@pytest.mark.parametrize("api_key", ["sk-test", None])
def test_the_request_template_matches_build_request(api_key: str | None) -> None:
    provider = OpenAIChatProvider(
        "http://127.0.0.1:9/v1", api_key, extra_headers={"X-Extra": "yes"}, timeout=42
    )
    client = provider._client
    for body in (b'{"model":"m"}', b"x" * 70_000, "é".encode()):
        fast = provider.request_for(body)
        slow = client.build_request("POST", provider._url, content=body, headers=provider._headers)
        assert (fast.method, fast.url) == (slow.method, slow.url)
        assert fast.headers.raw == slow.headers.raw
        assert fast.extensions == slow.extensions
        assert fast.read() == slow.read() == body


def test_a_client_holding_cookies_builds_each_request_whole() -> None:
    provider = OpenAIChatProvider("http://127.0.0.1:9/v1", "sk-test")
    provider.request_for(b"{}")  # the template exists
    provider._client.cookies.set("sticky", "node-2", domain="127.0.0.1")
    assert provider.request_for(b"{}").headers["cookie"] == "sticky=node-2"


async def test_keepalives_come_only_while_nothing_is_sent() -> None:
    """One timer per stream: a keepalive when `keepalive_s` pass with nothing sent, none
    while frames flow faster than that."""
    import asyncio

    from app.agent.events import TurnFinished, TurnText
    from app.api.chat.render import ChatFrames
    from app.api.http.sse import turn_stream
    from app.providers.pricing import Cost
    from app.providers.usage import Usage

    handle = TurnHandle("turn_k", "sess_k")
    frames = turn_stream(handle, ChatFrames(CompletionRenderer("m"), handle), 0.3)
    first = await frames.__anext__()  # nothing published: the role chunk and a keepalive
    assert b'"role":"assistant"' in first and first.endswith(b": keepalive\r\n\r\n")
    assert await frames.__anext__() == b": keepalive\r\n\r\n"
    got: list[bytes] = []

    async def publish() -> None:
        for i in range(12):  # a frame every 10 ms for 120 ms: never 300 ms of silence
            handle.publish(TurnText(f"w{i} "))
            await asyncio.sleep(0.01)
        handle.publish(TurnFinished("completed", "stop", Usage(), Cost.zero(), 1))

    publisher = asyncio.create_task(publish())
    async for frame in frames:
        got.append(frame)
    await publisher
    assert not any(b"keepalive" in frame for frame in got)
    assert b"[DONE]" in got[-1]
