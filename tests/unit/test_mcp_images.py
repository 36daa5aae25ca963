"""An MCP tool's image as the model sees it: attached where the wires take it, a placeholder
where they would refuse it, carried on each wire as its API allows, and rebuilt from the
store the same way every turn."""

from __future__ import annotations

import base64
import json

import pytest
from mcp.types import CallToolResult, ImageContent, TextContent

from app.agent.context.projection import project
from app.db.chat_store import StoredImage
from app.db.store import StoredMessage
from app.providers.anthropic import build_messages_body
from app.providers.base import (
    AssistantMessage,
    Image,
    ModelRequest,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from app.providers.openai_chat import (
    TOOL_IMAGES_NOTE,
    build_chat_body,
    encode_body,
    encode_chat_body,
)
from app.tools.mcp.results import MAX_IMAGE_BYTES, to_outcome

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 56
PNG_B64 = base64.b64encode(PNG).decode()


def outcome(*content: object):
    return to_outcome(CallToolResult(content=list(content)), server="srv", tool="tool")


def image(data: str, mime: str = "image/png") -> ImageContent:
    return ImageContent(type="image", data=data, mime_type=mime)


def test_an_image_the_wires_take_is_attached_and_still_named() -> None:
    # Line breaks inside the base64 (as some servers send it) are not stored as sent.
    wrapped = PNG_B64[:20] + "\n" + PNG_B64[20:]
    got = outcome(TextContent(type="text", text="look"), image(wrapped))
    assert got.images == (Image("image/png", PNG_B64),)
    assert "look\n\n[image image/png, 64 bytes, attached]" in got.content


@pytest.mark.parametrize(
    ("mime", "head"),
    [
        ("image/jpeg", b"\xff\xd8\xff\xe0"),
        ("image/gif", b"GIF89a"),
        ("image/webp", b"RIFF\x00\x00\x00\x00WEBPVP8 "),
    ],
)
def test_each_type_the_wires_take_is_attached(mime: str, head: bytes) -> None:
    data = base64.b64encode(head + b"\x00" * 8).decode()
    assert outcome(image(data, mime)).images == (Image(mime, data),)


@pytest.mark.parametrize(
    ("mime", "raw"),
    [
        ("image/png", b"\xff\xd8\xff\xe0" + b"\x00" * 8),  # a JPEG that says PNG
        ("image/webp", b"RIFF\x00\x00\x00\x00WAVEfmt "),  # a RIFF that is not WebP
        ("image/gif", b"<svg onload=alert(1)>"),
    ],
)
def test_bytes_that_are_not_the_claimed_image_stay_a_placeholder(mime: str, raw: bytes) -> None:
    got = outcome(image(base64.b64encode(raw).decode(), mime))
    assert got.images == () and "not shown]" in got.content


@pytest.mark.parametrize("mime", ["image/svg+xml", "image/tiff", "application/pdf", ""])
def test_a_type_the_wires_refuse_stays_a_placeholder(mime: str) -> None:
    got = outcome(image(PNG_B64, mime))
    assert got.images == () and f"[image {mime}, 64 bytes, not shown]" in got.content


def test_an_oversized_image_stays_a_placeholder() -> None:
    big = base64.b64encode(b"\x00" * (MAX_IMAGE_BYTES + 1)).decode()
    got = outcome(image(big))
    assert got.images == ()
    assert f"[image image/png, {MAX_IMAGE_BYTES + 1} bytes, not shown]" in got.content


@pytest.mark.parametrize("data", ["not base64 at all!!", "QUJD=", "A", "****", ""])
def test_malformed_base64_is_a_placeholder_never_a_crash(data: str) -> None:
    got = outcome(TextContent(type="text", text="before"), image(data))
    assert got.images == () and "not shown]" in got.content and not got.is_error


def call(call_id: str, name: str = "mcp__srv__tool") -> ToolCall:
    return ToolCall(call_id, name, "{}")


PICTURE = Image("image/png", PNG_B64)
RUN = (
    UserMessage("draw"),
    AssistantMessage(None, tool_calls=(call("c1"), call("c2"))),
    ToolResultMessage("c1", "mcp__srv__tool", "one", images=(PICTURE,)),
    ToolResultMessage("c2", "mcp__srv__tool", "two"),
)


def request(*messages: object) -> ModelRequest:
    return ModelRequest(model="m", system=(), messages=tuple(messages))  # type: ignore[arg-type]


def test_anthropic_puts_the_image_inside_its_tool_result() -> None:
    turns = build_messages_body(request(*RUN))["messages"]
    results = turns[2]["content"]
    assert results[0] == {
        "type": "tool_result",
        "tool_use_id": "c1",
        "content": [
            {"type": "text", "text": "one"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
            },
        ],
    }
    assert results[1] == {"type": "tool_result", "tool_use_id": "c2", "content": "two"}


def test_openai_chat_sends_the_image_after_the_whole_run_of_results() -> None:
    messages = build_chat_body(request(*RUN))["messages"]
    roles = [m["role"] for m in messages]
    # Every result of the assistant's calls before any other message, then the images.
    assert roles == ["user", "assistant", "tool", "tool", "user"]
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "one"}
    assert messages[4]["content"] == [
        {"type": "text", "text": TOOL_IMAGES_NOTE},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
    ]


def test_openai_chat_encoding_is_the_whole_build_and_repeats_byte_for_byte() -> None:
    first = request(*RUN)
    later = request(*RUN, AssistantMessage("seen"), UserMessage("again"))
    body = encode_chat_body(first)
    assert body == encode_body(build_chat_body(first))
    assert encode_chat_body(first) == body
    again = encode_chat_body(later)
    # The next turn's body starts with this one's messages, byte for byte.
    assert again == encode_body(build_chat_body(later))
    sent, resent = json.loads(body)["messages"], json.loads(again)["messages"]
    assert resent[: len(sent)] == sent and resent[4]["content"][1]["type"] == "image_url"


def row(row_id: int, role: str, **fields: object) -> StoredMessage:
    base: dict[str, object] = {
        "content": None,
        "api_content": None,
        "tool_calls": (),
        "tool_call_id": None,
        "tool_name": None,
        "is_error": False,
        "turn_id": None,
    }
    return StoredMessage(id=row_id, role=role, **{**base, **fields})  # type: ignore[arg-type]


def test_a_tool_row_finds_its_images_when_the_history_is_rebuilt() -> None:
    key = "k" * 64
    rows = [
        row(1, "user", content="draw"),
        row(2, "assistant", tool_calls=({"id": "c1", "name": "mcp__srv__tool"},)),
        row(3, "tool", content="one", tool_call_id="c1", images=(key,)),
    ]
    stored = {key: StoredImage(key, "image/png", PNG_B64, "")}
    assert project(rows, stored)[2] == ToolResultMessage(
        "c1", "mcp__srv__tool", "one", images=(PICTURE,)
    )
