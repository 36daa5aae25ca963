"""The client's messages, split into what Courier keeps where.

Leading system/developer messages are the context tier of the session's prompt; every
later one is an instruction kept in the log at its place. User, assistant and tool
messages become log rows; images are stored once per session and referenced by hash.
The same split also yields the client-visible transcript that stateless continuity
matches on (`app/agent/continuity.py`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from app.agent.continuity import VisibleMessage
from app.db.chat_store import StoredImage
from app.db.store import NewMessage
from app.protocol.errors import ApiError
from app.protocol.openai import ChatCompletionRequest, ChatMessageIn
from app.providers.base import ToolSpec

_INSTRUCTION_ROLES = ("system", "developer")
_DATA_URL = re.compile(r"^data:(image/[A-Za-z0-9.+-]+);base64,(.*)$", re.S)


@dataclass(frozen=True, slots=True)
class Conversation:
    instructions: list[str]
    """Leading system/developer texts: the context tier."""
    rest: list[ChatMessageIn]
    """Everything after them, in order."""
    offset: int
    """Index of `rest[0]` in the request's `messages` (for error `param`s)."""


def split(request: ChatCompletionRequest) -> Conversation:
    messages = request.messages
    n = 0
    while n < len(messages) and messages[n].role in _INSTRUCTION_ROLES:
        n += 1
    return Conversation([m.text() for m in messages[:n]], list(messages[n:]), n)


def image_of(url: str, *, param: str) -> StoredImage:
    """An image part as stored: data URLs decoded once and keyed by content hash."""
    if match := _DATA_URL.match(url):
        media_type, payload = match.group(1), match.group(2).strip()
        try:
            raw = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "the image data URL is not valid base64", param=param) from None
        sha = hashlib.sha256(raw).hexdigest()
        return StoredImage(sha, media_type, base64.b64encode(raw).decode(), "")
    if url.startswith("https://"):
        return StoredImage(hashlib.sha256(url.encode()).hexdigest(), "", "", url)
    raise ApiError(
        400,
        "image_url must be an https URL or a base64 data URL (data:image/...;base64,...)",
        param=param,
        code="invalid_image_url",
    )


def rows_for(
    messages: Sequence[ChatMessageIn], *, offset: int = 0
) -> tuple[list[NewMessage], list[StoredImage]]:
    """Log rows for client messages, and the images they carry."""
    rows: list[NewMessage] = []
    images: list[StoredImage] = []
    for i, m in enumerate(messages):
        if m.role == "user":
            stored = [image_of(url, param=f"messages[{offset + i}].content") for url in m.images()]
            images += stored
            rows.append(
                NewMessage(role="user", content=m.text(), images=tuple(s.sha256 for s in stored))
            )
        elif m.role in _INSTRUCTION_ROLES:
            rows.append(NewMessage(role="system", content=m.text()))
        elif m.role == "assistant":
            calls = [
                {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                for c in m.tool_calls or []
            ]
            if m.text() or calls:
                rows.append(
                    NewMessage(role="assistant", content=m.text() or None, tool_calls=calls)
                )
        elif m.role == "tool":
            rows.append(
                NewMessage(
                    role="tool", content=m.text(), tool_call_id=m.tool_call_id, tool_name=m.name
                )
            )
    return rows, images


def visible(message: ChatMessageIn, *, param: str = "messages") -> VisibleMessage | None:
    """The message as the continuity chain sees it, or None for an instruction."""
    if message.role == "user":
        keys = tuple(image_of(url, param=param).sha256 for url in message.images())
        return VisibleMessage("user", message.text(), images=keys)
    if message.role == "assistant":
        calls = tuple(
            (c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []
        )
        return VisibleMessage("assistant", message.text(), calls=calls)
    if message.role == "tool":
        return VisibleMessage("tool", message.text(), call_id=message.tool_call_id or "")
    return None


def new_tail(rest: Sequence[ChatMessageIn]) -> int:
    """Where the new part of a request for a known session starts: the trailing run of
    user, instruction and tool messages (plus a final assistant prefill). With a session
    id the server's log is the truth, so older messages are not appended again."""
    end = len(rest)
    if end and rest[-1].role == "assistant":
        end -= 1
    start = end
    while start > 0 and rest[start - 1].role != "assistant":
        start -= 1
    return start


def client_specs(request: ChatCompletionRequest) -> tuple[ToolSpec, ...]:
    """The client's tool schemas in a stable order, so the same set keeps the cache."""
    specs = {
        t.function.name: ToolSpec(
            name=t.function.name,
            description=t.function.description or "",
            parameters=t.function.parameters or {"type": "object", "properties": {}},
        )
        for t in request.tools or []
    }
    return tuple(specs[name] for name in sorted(specs))


def serialise_client_specs(specs: Sequence[ToolSpec]) -> str:
    payload = [
        {"name": s.name, "description": s.description, "parameters": s.parameters} for s in specs
    ]
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
