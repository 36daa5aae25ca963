"""An MCP server's answer as a tool result the model reads: text, fenced as untrusted.

The server is outside Courier: what it returns may be written to steer the model, so
every result, errors included, is fenced (app/tools/untrusted.py). Content a chat wire
cannot carry in a tool result (images, audio, binary resources) is named, with its size,
rather than dropped silently: the model then knows the tool answered and what it left out.
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

from app.tools.mcp.remote import RESULT_KIND
from app.tools.registry import ToolOutcome
from app.tools.untrusted import fence

KIND = RESULT_KIND


def to_outcome(result: CallToolResult, *, server: str, tool: str) -> ToolOutcome:
    text = result_text(result)
    return ToolOutcome(fence(text, f"{server}/{tool}", kind=KIND), is_error=bool(result.is_error))


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
        return f"[image {block.mime_type}, {_decoded_size(block.data)} bytes, not shown]"
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
