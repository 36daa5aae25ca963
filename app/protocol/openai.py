"""OpenAI chat-completions wire models.

Requests are lenient: clients (Open WebUI, LibreChat, voice cockpits) send fields we do
not use, and failing on them would break those clients; unknown fields are accepted and
logged as ignored. Responses are strict and match the official spec.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

log = logging.getLogger(__name__)


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class ContentPart(_Lenient):
    type: str
    text: str | None = None


class FunctionCallIn(_Lenient):
    name: str = ""
    arguments: str = ""


class ToolCallIn(_Lenient):
    id: str = ""
    type: str = "function"
    function: FunctionCallIn = Field(default_factory=FunctionCallIn)


class ChatMessageIn(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The message's text; non-text parts (images, audio) are not supported yet."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text or "" for part in self.content if part.type == "text")

    def has_non_text_parts(self) -> bool:
        return isinstance(self.content, list) and any(p.type != "text" for p in self.content)


class StreamOptions(_Lenient):
    include_usage: bool = False


class ChatCompletionRequest(_Lenient):
    model: str = Field(min_length=1, max_length=256)
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    user: str | None = None
    session_id: str | None = Field(default=None, min_length=1, max_length=128)
    """Courier extension: continue a stored session (same as the `X-Session-Id` header)."""
    max_cost_usd: float | None = Field(default=None, ge=0)
    """Courier extension: a spend cap for this request, in USD."""

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and any(not s for s in value):
            raise ValueError("stop strings must be non-empty")
        return value

    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def output_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def ignored_fields(self) -> list[str]:
        return sorted((self.model_extra or {}).keys())


# ---------------------------------------------------------------------------- responses


class PromptTokensDetails(BaseModel):
    cached_tokens: int
    cache_write_tokens: int


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int


class CourierCost(BaseModel):
    amount_usd: str | None
    status: str
    source: str


class CourierUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    upstream_calls: int
    cost: CourierCost


class UsageOut(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails
    cost: float | None
    courier: CourierUsage


class ResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: None = None


class Choice(BaseModel):
    index: int = 0
    message: ResponseMessage
    finish_reason: Literal["stop", "length", "content_filter", "tool_calls"]
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: UsageOut


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: Literal["stop", "length", "content_filter", "tool_calls"] | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: UsageOut | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "courier"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
