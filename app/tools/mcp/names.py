"""How an MCP tool is named and described to the model: `mcp__<server>__<tool>`.

Tool names, descriptions and schemas come from the server, so they are untrusted input
that rides in every prompt of every session. Names are sanitised to what every wire
accepts (at most 64 characters of `[A-Za-z0-9_-]`), deterministically, so one listing
always gives the same bytes; descriptions and schemas are capped, so one server cannot
inflate every prompt.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.tools.untrusted import defang

PREFIX = "mcp__"
MAX_NAME_CHARS = 64
"""OpenAI's limit for a function name; Anthropic's is the same."""
MAX_DESCRIPTION_CHARS = 2000
MAX_SCHEMA_BYTES = 16 * 1024
MAX_TOOLS_PER_SERVER = 128
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def is_mcp_name(name: str) -> bool:
    return name.startswith(PREFIX)


def server_of(name: str) -> str:
    """The server part of a model-facing MCP name ("" for any other name)."""
    if not is_mcp_name(name):
        return ""
    return name[len(PREFIX) :].partition("__")[0]


def tool_of(name: str) -> str:
    """The tool part of a model-facing MCP name (its raw name unless it was cut or
    sanitised)."""
    return name[len(PREFIX) :].partition("__")[2] if is_mcp_name(name) else ""


def _suffix(raw: str) -> str:
    return "_" + hashlib.sha256(raw.encode()).hexdigest()[:6]


def model_names(server: str, raw_names: Iterable[str]) -> dict[str, str]:
    """model-facing name -> raw name, for one server's tools.

    Raw names are taken in sorted order, so the same listing gives the same map. A name
    that sanitises onto another, or that passes 64 characters, gets a suffix from the hash
    of its raw name: stable across restarts, and unique in practice."""
    head = f"{PREFIX}{server}__"
    room = MAX_NAME_CHARS - len(head)
    found: dict[str, str] = {}
    for raw in sorted(set(raw_names)):
        clean = _UNSAFE.sub("_", raw) or "_"
        name = head + clean
        if len(name) > MAX_NAME_CHARS or name in found:
            name = head + clean[: room - 7] + _suffix(raw)
        found[name] = raw
    return found


def description(text: str | None, *, server: str) -> str:
    body = defang((text or "").strip())
    if len(body) > MAX_DESCRIPTION_CHARS:
        body = body[: MAX_DESCRIPTION_CHARS - 1] + "…"
    source = f"(from MCP server {server})"
    return f"{body} {source}" if body else source


@dataclass(frozen=True, slots=True)
class LeftOut:
    tool: str
    why: str


def parameters(schema: Mapping[str, Any] | None) -> dict[str, Any] | str:
    """The tool's input schema as the model gets it, or why it is left out.

    The root must be an object schema (every wire requires one), so the missing parts of
    one are added; a schema over 16 KB is refused rather than cut, since a cut schema is
    a different contract."""
    value: dict[str, Any] = dict(schema or {})
    if value.get("type", "object") != "object":
        return f"input schema is of type {value.get('type')!r}, not object"
    value["type"] = "object"
    value.setdefault("properties", {})
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_SCHEMA_BYTES:
        return f"input schema is {size} bytes, over {MAX_SCHEMA_BYTES}"
    return value
