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


class ImageUrl(_Lenient):
    url: str = Field(min_length=1)
    detail: str | None = None


class ContentPart(_Lenient):
    type: str
    text: str | None = None
    image_url: ImageUrl | str | None = None

    def image(self) -> str | None:
        """The image's URL (https or data:) for an `image_url` part, else None."""
        if self.type != "image_url" or self.image_url is None:
            return None
        return self.image_url if isinstance(self.image_url, str) else self.image_url.url


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
        """The message's text parts joined; images are read by `images()`."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text or "" for part in self.content if part.type == "text")

    def images(self) -> list[str]:
        if not isinstance(self.content, list):
            return []
        return [url for part in self.content if (url := part.image()) is not None]

    def unsupported_part(self) -> str | None:
        """The type of the first content part we cannot forward, if any."""
        if not isinstance(self.content, list):
            return None
        for part in self.content:
            if part.type not in ("text", "image_url"):
                return part.type
        return None


class StreamOptions(_Lenient):
    include_usage: bool = False


class FunctionDef(_Lenient):
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(_Lenient):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Lenient):
    name: str = Field(min_length=1)


class NamedToolChoice(_Lenient):
    type: Literal["function"] = "function"
    function: NamedFunction


class JsonSchemaFormat(_Lenient):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Lenient):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
"""The efforts a request may ask for (chat's `reasoning_effort`, Responses'
`reasoning.effort`)."""


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
    tools: list[ToolDef] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    seed: int | None = None
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    reasoning_effort: ReasoningEffort | None = None
    service_tier: str | None = None
    metadata: dict[str, str] | None = None
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None
    user: str | None = None
    safety_identifier: str | None = None
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

    def unknown_fields(self) -> list[str]:
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
    routes: list[str] = []
    """The profiles the turn fell back through, in order; empty when it did not."""


class UsageOut(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails
    cost: float | None
    courier: CourierUsage


class FunctionCallOut(BaseModel):
    name: str
    arguments: str


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallOut


class ResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: None = None
    tool_calls: list[ToolCallOut] | None = None


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
