"""The provider-neutral request and event format every adapter converts to and from.

The agent loop speaks only these records; wire translation lives inside each adapter, so
a provider's quirks never leak into the loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from app.providers.usage import Usage

# ---------------------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    """The raw JSON text the model emitted; parsed (and repaired) by the loop, not here."""


@dataclass(frozen=True, slots=True)
class SystemBlock:
    text: str
    cache: bool = False
    """Ask the provider to place a cache breakpoint at the end of this block."""


@dataclass(frozen=True, slots=True)
class Image:
    """An image the user attached (a data URL's bytes, base64, or an https URL), or one an
    MCP tool returned (always base64)."""

    media_type: str = ""
    data: str = ""
    """Base64 payload of a `data:` URL; empty when `url` is set."""
    url: str = ""


@dataclass(frozen=True, slots=True)
class UserMessage:
    content: str
    kind: Literal["user"] = "user"
    cache: bool = False
    prefix_cache_at: int | None = None
    """Split the text here into a cached prefix block and an uncached tail block."""
    instruction: bool = False
    """A system/developer message from the middle or end of the client's conversation: an
    instruction for this point of the turn. Each wire renders it as its API allows."""
    images: tuple[Image, ...] = ()


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    kind: Literal["assistant"] = "assistant"
    cache: bool = False


@dataclass(frozen=True, slots=True)
class ToolResultMessage:
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False
    kind: Literal["tool"] = "tool"
    cache: bool = False
    images: tuple[Image, ...] = ()
    """Images the tool returned (an MCP server's ImageContent); each wire carries them as
    its API allows, after `content`."""


Message = UserMessage | AssistantMessage | ToolResultMessage


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments object."""


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    max_tokens: int | None = None
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: tuple[tuple[str, float], ...] = ()
    reasoning_effort: str | None = None
    service_tier: str | None = None
    user: str | None = None
    metadata: tuple[tuple[str, str], ...] = ()


CONNECT_TIMEOUT_S = 30.0
"""The cap on an upstream connect, whatever the read timeout: the read timeout bounds the
silence between chunks (minutes, for a slow reasoning model), and a host that never answers
the connect must fail fast enough for the retry layer to act."""

SAMPLING_FIELDS = (
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "reasoning_effort",
    "service_tier",
    "user",
    "metadata",
)
"""Request fields an adapter forwards when its wire has them (see `Provider.passthrough`)."""


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """Structured output the final answer must follow (`response_format`)."""

    kind: Literal["json_object", "json_schema"]
    schema: dict[str, Any] | None = None
    name: str = "response"
    strict: bool = False


ToolChoice = Literal["auto", "none", "required"] | str
"""`auto`, `none`, `required`, or the name of the one function the model must call."""


@dataclass(frozen=True, slots=True)
class ModelRequest:
    model: str
    system: tuple[SystemBlock, ...]
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    cache_ttl: Literal["5m", "1h"] = "5m"
    prompt_cache_key: str | None = None
    """OpenAI-wire routing hint so requests of one session land on a warm cache."""
    tool_choice: ToolChoice = "auto"
    """`none` keeps the schemas (a transcript with tool calls needs them) but forbids calls;
    any other string than auto/none/required names the function the model must call."""
    parallel_tool_calls: bool | None = None
    output_format: OutputFormat | None = None


def cache_control(ttl: str) -> dict[str, str]:
    """The `cache_control` marker both wires use (natively on Anthropic, on envelope routes
    over the OpenAI wire). "5m" is the default and stays implicit, keeping the bytes the
    routes have always seen."""
    return {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}


# ---------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str
    kind: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    """A fragment of the JSON arguments text, to be concatenated in order."""
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class UsageEvent:
    usage: Usage
    raw: dict[str, Any] = field(default_factory=dict)
    kind: Literal["usage"] = "usage"


FinishReason = Literal["stop", "tool_calls", "length", "content_filter"]


@dataclass(frozen=True, slots=True)
class Finish:
    reason: FinishReason
    kind: Literal["finish"] = "finish"


ProviderEvent = TextDelta | ReasoningDelta | ToolCallDelta | UsageEvent | Finish


def coalesced(events: list[ProviderEvent]) -> list[ProviderEvent]:
    """Runs of text (and of reasoning) deltas that arrived together, as one delta each.

    A fast upstream, or one the loop fell behind, hands over dozens of chunks in one read.
    Passed on one by one, each paid the whole path (the loop's generators, the reply
    builder, a turn event, the client's frame): about 60,000 instructions a chunk, a third
    of a short reply's cost. Nothing that arrived together is held back for this, and the
    order of everything else is kept; a client reads the same text in fewer chunks."""
    if len(events) < 2:
        return events
    out: list[ProviderEvent] = []
    run: list[TextDelta | ReasoningDelta] = []

    def flush() -> None:
        if len(run) > 1:
            out.append(type(run[0])("".join(delta.text for delta in run)))
        else:
            out.extend(run)
        run.clear()

    for event in events:
        if isinstance(event, TextDelta | ReasoningDelta):
            if run and type(run[0]) is not type(event):
                flush()
            run.append(event)
        else:
            flush()
            out.append(event)
    flush()
    return out


# ---------------------------------------------------------------------------- errors

ErrorKind = Literal[
    "rate_limited",
    "overloaded",
    "server_error",
    "context_overflow",
    "bad_request",
    "auth",
    "not_found",
    "content_policy",
    "connection",
    "stream_dropped",
    "timeout",
]
"""`timeout`: the upstream accepted the connection, then stayed silent (before its headers
or between chunks) past the profile's `upstream_timeout_s`: a hung upstream, retried like
a transient fault while nothing was shown yet, and named so a client can tell it apart."""


class ProviderError(Exception):
    """An upstream failure classified into recovery hints the loop reads as booleans."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message
        self.status = status
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return self.kind in ("rate_limited", "overloaded", "server_error", "connection", "timeout")

    @property
    def should_compress(self) -> bool:
        return self.kind == "context_overflow"

    @property
    def should_rotate(self) -> bool:
        """Another upstream key of the same profile may succeed (throttled or refused key)."""
        return self.kind in ("rate_limited", "auth")

    @property
    def should_fall_back(self) -> bool:
        """Another profile's route may succeed where this one cannot right now."""
        return self.kind in (
            "rate_limited",
            "overloaded",
            "server_error",
            "connection",
            "stream_dropped",
            "timeout",
            "auth",
            "not_found",
        )

    @property
    def give_up(self) -> bool:
        """The request itself is refused: no retry, key or route changes that."""
        return not (self.retryable or self.should_compress or self.should_fall_back)


# ---------------------------------------------------------------------------- protocol


class Provider(Protocol):
    """One required method: a streamed request yielding provider-neutral events.

    The stream ends with exactly one `Finish`, preceded by at most one `UsageEvent`.
    Failures raise `ProviderError`, never a wire-specific exception.
    """

    passthrough: frozenset[str]
    """Which of `SAMPLING_FIELDS` this wire forwards; the rest are reported as ignored."""
    prefill: bool
    """Whether a trailing assistant message is continued (assistant prefill)."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]: ...

    async def aclose(self) -> None: ...
