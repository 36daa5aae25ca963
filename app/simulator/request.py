"""The wire-neutral view of one upstream request, and the errors either wire can answer.

Each wire module parses its body into a `SimRequest`; scripts, the demo policy and the
cache accounting read only this, so they behave the same on both wires.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from app.simulator.token_count import Segment, total_tokens

Wire = Literal["openai", "anthropic"]
LastRole = Literal["user", "assistant", "tool", "system", "none"]
ErrorKind = Literal[
    "invalid_request",
    "authentication",
    "permission",
    "not_found",
    "request_too_large",
    "rate_limit",
    "api_error",
    "overloaded",
]


class SimError(Exception):
    """An error response; each wire renders it in its own body shape."""

    def __init__(
        self,
        status: int,
        kind: ErrorKind,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind: ErrorKind = kind
        self.message = message
        self.code = code
        """OpenAI `error.code` (e.g. `context_length_exceeded`)."""
        self.param = param
        """OpenAI `error.param`."""
        self.headers = headers or {}


def error_kind_for_status(status: int) -> ErrorKind:
    """The error type a real provider pairs with `status` (used by scripted faults)."""
    known: dict[int, ErrorKind] = {
        400: "invalid_request",
        401: "authentication",
        403: "permission",
        404: "not_found",
        413: "request_too_large",
        429: "rate_limit",
        529: "overloaded",
    }
    if status in known:
        return known[status]
    return "api_error" if status >= 500 else "invalid_request"


@dataclass(frozen=True, slots=True)
class ToolResult:
    tool_name: str | None
    """Name of the call it answers, looked up by id in the history (None if not found)."""
    content: str
    is_error: bool = False
    arguments: str = ""
    """The answered call's arguments as JSON text ("" if the call is not in the history)."""


@dataclass(frozen=True, slots=True)
class Breakpoint:
    """An Anthropic `cache_control` marker at the end of `segments[segment_index]`."""

    segment_index: int
    ttl_seconds: float


@dataclass(frozen=True, slots=True)
class SimRequest:
    wire: Wire
    model: str
    stream: bool
    segments: tuple[Segment, ...]
    include_usage: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    stop: tuple[str, ...] = ()
    tool_names: tuple[str, ...] = ()
    tools_disabled: bool = False
    """`tool_choice: "none"`: tools are listed but must not be called."""
    system_text: str = ""
    last_role: LastRole = "none"
    last_user_text: str = ""
    """Text of the most recent message a user wrote (tool results do not count)."""
    last_tool_results: tuple[ToolResult, ...] = ()
    """The most recent group of tool results, wherever it sits in the history."""
    breakpoints: tuple[Breakpoint, ...] = ()
    prompt_cache_key: str | None = None
    cache_ttl_seconds: float = 300.0
    """TTL of OpenAI automatic prefix caching entries."""
    tool_parameters: Mapping[str, Any] = field(default_factory=dict)
    """Each offered tool's parameter schema, by name (the demo fills forced calls from it)."""
    forced_tool: str | None = None
    """`tool_choice` naming one tool: the model must call it."""
    output_schema: dict[str, Any] | None = None
    """Structured output asked for (`response_format` / `output_config.format`); `{}` for
    a plain JSON object. The demo policy then answers with a value that fits it."""

    @property
    def prompt_tokens(self) -> int:
        return total_tokens(self.segments)

    @property
    def has_tools(self) -> bool:
        return bool(self.tool_names)


class HistoryFacts:
    """Folds a conversation, message by message, into the facts scripts and policy read."""

    def __init__(self) -> None:
        self.system_parts: list[str] = []
        self.last_role: LastRole = "none"
        self.last_user_text = ""
        self.last_tool_results: list[ToolResult] = []
        self._calls: dict[str, tuple[str, str]] = {}
        self._in_results = False

    def system(self, text: str) -> None:
        self.system_parts.append(text)
        self.last_role = "system"
        self._in_results = False

    def user(self, text: str) -> None:
        self.last_user_text = text
        self.last_role = "user"
        self._in_results = False

    def assistant(self) -> None:
        self.last_role = "assistant"
        self._in_results = False

    def tool_call(self, call_id: str, name: str, arguments: str) -> None:
        self._calls[call_id] = (name, arguments)

    def tool_result(self, call_id: str, content: str, *, is_error: bool = False) -> None:
        # Consecutive results form one group; a new group replaces the previous one.
        if not self._in_results:
            self.last_tool_results = []
            self._in_results = True
        name, arguments = self._calls.get(call_id, (None, ""))
        self.last_tool_results.append(ToolResult(name, content, is_error, arguments))
        self.last_role = "tool"

    @property
    def system_text(self) -> str:
        return "\n\n".join(self.system_parts)
