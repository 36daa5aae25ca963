"""The values the store takes and hands out, and their rows: what a caller writes
(`NewMessage`, `ApiCallRecord`) and reads back (`StoredMessage`, a `SessionRow`).

Converted here, in one place, in both directions: the insert's values and the row a read
of them returns must agree field by field, or a kept live log would differ from a fresh
read of the same rows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection

from app.db import tool_sets
from app.db.models import MessageRow, SessionRow
from app.db.turn_sql import SESSION_COLUMNS, SESSION_FLAGS, session_row


@dataclass(frozen=True, slots=True)
class NewMessage:
    role: str
    content: str | None = None
    tool_calls: Sequence[dict[str, str]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    reasoning: str | None = None
    api_content: str | None = None
    kind: str | None = None
    images: tuple[str, ...] = ()
    """sha256 keys of images stored once per session (`put_images`)."""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    id: int
    role: str
    content: str | None
    api_content: str | None
    tool_calls: tuple[dict[str, str], ...]
    tool_call_id: str | None
    tool_name: str | None
    is_error: bool
    turn_id: str | None
    kind: str | None = None
    images: tuple[str, ...] = ()

    def as_new(self, **changes: object) -> NewMessage:
        """A copy of this row for re-insertion (compaction re-inserts the tail)."""
        fields: dict[str, object] = {
            "role": self.role,
            "content": self.content,
            "api_content": self.api_content,
            "tool_calls": list(self.tool_calls) or None,
            "tool_call_id": self.tool_call_id,
            "tool_name": self.tool_name,
            "is_error": self.is_error,
            "kind": self.kind,
            "images": self.images,
        }
        fields.update(changes)
        return NewMessage(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class ApiCallRecord:
    profile: str
    upstream_model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    cost_usd: Decimal | None
    cost_status: str
    cost_source: str
    latency_ms: float
    ttft_ms: float | None
    outcome: str
    cache_break: str | None = None


def message_row(m: NewMessage, *, session_id: str, turn_id: str | None) -> MessageRow:
    return MessageRow(
        session_id=session_id,
        turn_id=turn_id,
        role=m.role,
        content=m.content,
        api_content=m.api_content,
        tool_calls=json.dumps(list(m.tool_calls)) if m.tool_calls else None,
        tool_call_id=m.tool_call_id,
        tool_name=m.tool_name,
        is_error=m.is_error,
        reasoning=m.reasoning,
        kind=m.kind,
        images=json.dumps(list(m.images)) if m.images else None,
    )


def message_values(m: NewMessage, *, session_id: str, turn_id: str | None) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "turn_id": turn_id,
        "role": m.role,
        "content": m.content,
        "api_content": m.api_content,
        "tool_calls": json.dumps(list(m.tool_calls)) if m.tool_calls else None,
        "tool_call_id": m.tool_call_id,
        "tool_name": m.tool_name,
        "is_error": m.is_error,
        "reasoning": m.reasoning,
        "kind": m.kind,
        "images": json.dumps(list(m.images)) if m.images else None,
        "active": True,
        "compacted": False,
        "created_at": time.time(),
    }


def stored_values(message_id: int, v: dict[str, Any]) -> StoredMessage:
    """The row `message_values` inserted, as a read of it would return it."""
    return StoredMessage(
        id=message_id,
        role=v["role"],
        content=v["content"],
        api_content=v["api_content"],
        tool_calls=tuple(json.loads(v["tool_calls"])) if v["tool_calls"] else (),
        tool_call_id=v["tool_call_id"],
        tool_name=v["tool_name"],
        is_error=bool(v["is_error"]),
        turn_id=v["turn_id"],
        kind=v["kind"],
        images=tuple(json.loads(v["images"])) if v["images"] else (),
    )


def stored(row: MessageRow) -> StoredMessage:
    assert row.id is not None
    calls: tuple[dict[str, str], ...] = tuple(json.loads(row.tool_calls)) if row.tool_calls else ()
    return StoredMessage(
        id=row.id,
        role=row.role,
        content=row.content,
        api_content=row.api_content,
        tool_calls=calls,
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        is_error=row.is_error,
        turn_id=row.turn_id,
        kind=row.kind,
        images=tuple(json.loads(row.images)) if row.images else (),
    )


def session_from(conn: Connection, found: Sequence[Any]) -> SessionRow:
    """A session row from a statement that selected (or returned) every column in order,
    its tool snapshot resolved (app/db/tool_sets.py)."""
    values = dict(zip(SESSION_COLUMNS, found, strict=True))
    for flag in SESSION_FLAGS:
        values[flag] = bool(values[flag])
    values["tool_snapshot"] = tool_sets.resolve(conn, values["tool_snapshot"])
    return session_row(values)
