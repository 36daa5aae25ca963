"""An MCP server's answer as a tool result the model reads: text, fenced as untrusted.

The server is outside Courier: what it returns may be written to steer the model, so
every result, errors included, is fenced (app/tools/untrusted.py). Content the model
cannot be shown (audio, binary resources, an image too big or of a type the wires do not
take, or whose base64 does not decode) is named, with its size, rather than dropped
silently: the model then knows the tool answered and what it left out. An image the wires
accept keeps its line in the text and rides beside it (`ToolOutcome.images`), so the
result reads the same whether or not a wire can show it.
Failures of the connection itself (a timeout, a crash) become error results the model can
act on; none of them raise.
"""

from __future__ import annotations

import base64
import binascii
import json

from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from app.providers.base import Image
from app.tools.mcp.remote import RESULT_KIND
from app.tools.registry import ToolOutcome
from app.tools.untrusted import fence

KIND = RESULT_KIND

IMAGE_TYPES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
"""The image types both wires take (Anthropic's image block accepts only these four), with
the bytes each file starts with: bytes that are not the image they claim to be would be
refused upstream on this turn and on every later one, which resends them."""
MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""Decoded size past which an image stays a placeholder: Anthropic refuses a bigger image
with a 400, and that would fail every later turn of the session, which resends it."""


def to_outcome(result: CallToolResult, *, server: str, tool: str) -> ToolOutcome:
    text = result_text(result)
    fenced = fence(text, f"{server}/{tool}", kind=KIND)
    return ToolOutcome(fenced, is_error=bool(result.is_error), images=result_images(result))


def result_images(result: CallToolResult) -> tuple[Image, ...]:
    """The images of the result the model is shown (`attached` in `result_text`)."""
    return tuple(i for b in result.content if (i := shown_image(b)) is not None)


def shown_image(block: object) -> Image | None:
    """The image block as the model is shown it, or None when it stays a placeholder."""
    if not isinstance(block, ImageContent) or block.mime_type not in IMAGE_TYPES:
        return None
    try:
        raw = base64.b64decode("".join(block.data.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) > MAX_IMAGE_BYTES or not raw.startswith(IMAGE_TYPES[block.mime_type]):
        return None
    if block.mime_type == "image/webp" and raw[8:12] != b"WEBP":
        return None
    # Re-encoded from the bytes: the stored and resent payload is canonical base64
    # whatever padding or line breaks the server sent.
    return Image(block.mime_type, base64.b64encode(raw).decode())


def result_text(result: CallToolResult) -> str:
    """The result's content as one text, unfenced (`error: ...` when the server says so)."""
    parts = [_part(block) for block in result.content]
    texts = [p for p in parts if p]
    has_text = any(isinstance(block, TextContent) for block in result.content)
    # A server that answers only with structured content still says something.
    if not has_text and result.structured_content is not None:
        texts.insert(0, _compact(result.structured_content))
    text = "\n\n".join(texts) or "(the tool returned no content)"
    return f"error: {text}" if result.is_error else text


def _part(block: object) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent):
        size = _decoded_size(block.data)
        if shown_image(block) is not None:
            return f"[image {block.mime_type}, {size} bytes, attached]"
        return f"[image {block.mime_type}, {size} bytes, not shown]"
    if isinstance(block, AudioContent):
        return f"[audio {block.mime_type}, {_decoded_size(block.data)} bytes, not shown]"
    if isinstance(block, ResourceLink):
        return f"[resource link: {block.uri} {block.name}]"
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        mime = resource.mime_type or "unknown type"
        if isinstance(resource, TextResourceContents):
            return f"resource {resource.uri} ({mime}):\n{resource.text}"
        if isinstance(resource, BlobResourceContents):
            size = _decoded_size(resource.blob)
            return f"[binary resource {resource.uri}, {mime}, {size} bytes, not shown]"
    return f"[content of type {getattr(block, 'type', '?')}, not shown]"


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def failed(server: str, tool: str, text: str) -> ToolOutcome:
    """A call that did not get an answer from the server, as an error result."""
    return ToolOutcome(fence(f"error: {text}", f"{server}/{tool}", kind=KIND), is_error=True)
