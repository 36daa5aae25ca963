"""Responses API wire models: the lenient request `POST /v1/responses` parses into.

The Responses API is a second front door, not a second agent: its request is translated
straight into what the agent is asked (`app/api/responses/translate.py`) and started as
a chat turn is (`app/api/turn_serving.py`), so caps, caching, tools and usage behave
identically on both endpoints. Only the shapes differ; the Response objects and stream
events it answers with are `app/api/responses/render.py`'s.
"""

from __future__ import annotations

import secrets
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

CLIENT_TOOLS = True
"""Client-defined function tools: the turn ends at their calls, as on the chat path."""
STRUCTURED_OUTPUT = True
"""`text.format` json_schema/json_object: the same structured output as chat's
`response_format`."""

BUILTIN_TOOL_TYPES = frozenset(
    {
        "web_search",
        "web_search_preview",
        "file_search",
        "computer_use_preview",
        "computer",
        "code_interpreter",
        "image_generation",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "custom",
    }
)


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class ResponseCreateRequest(_Lenient):
    """`POST /v1/responses`. Unknown fields are accepted and logged as ignored."""

    model: str = Field(min_length=1, max_length=256)
    input: str | list[dict[str, Any]] = Field(min_length=1)
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=128)
    store: bool = True
    stream: bool = False
    background: bool | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    reasoning: dict[str, Any] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    max_cost_usd: float | None = Field(default=None, ge=0)
    """Courier extension: a spend cap for this response, in USD."""

    def ignored_fields(self) -> list[str]:
        return sorted((self.model_extra or {}).keys())


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"
