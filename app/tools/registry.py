"""The tool registry: schemas the model sees, and one dispatch that never raises.

A malformed call is the model's mistake, so it becomes an error result the model reads on
its next iteration. An exception escaping a handler is our bug: it is logged with its
traceback, and the model still gets a result so the transcript stays valid.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.providers.base import ToolCall, ToolSpec

log = logging.getLogger(__name__)


class ToolError(Exception):
    """A failure the model should read and can act on (bad path, missing file, ...)."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    session_id: str
    workspace: Path


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler
    read_only: bool = True

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    content: str
    is_error: bool = False


def parse_arguments(raw: str) -> dict[str, Any] | str:
    """The call's arguments as an object, or a message explaining why they are unusable."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
    if not isinstance(value, dict):
        return f"arguments must be a JSON object, got {type(value).__name__}"
    return value


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        # Sorted by name so the serialised schema list is identical on every request.
        return tuple(self._tools[name].spec() for name in sorted(self._tools))

    async def run(self, call: ToolCall, ctx: ToolContext) -> ToolOutcome:
        tool = self._tools.get(call.name)
        if tool is None:
            # An empty or invented name gets the same treatment: the model reads the list.
            known = ", ".join(self.names())
            return ToolOutcome(f"error: unknown tool {call.name!r}; available: {known}", True)
        args = parse_arguments(call.arguments)
        if isinstance(args, str):
            return ToolOutcome(f"error: {call.name}: {args}", True)
        try:
            return ToolOutcome(await tool.handler(args, ctx))
        except ToolError as exc:
            return ToolOutcome(f"error: {exc}", True)
        except Exception:
            log.exception("tool %s failed", call.name)
            return ToolOutcome(f"error: {call.name} failed with an internal error", True)
