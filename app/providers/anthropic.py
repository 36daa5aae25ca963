"""Adapter for the Anthropic Messages API, with the official SDK as its HTTP client.

The body is built and encoded here (orjson, spliced from per-message fragments) and the
SDK hands back the raw streamed response, parsed here as well; see `AnthropicProvider`.
The SDK's own retries are off (`max_retries=0`): they ignore our Retry-After cap and would
multiply with `stream_with_retry`, so one failure could become nine upstream calls.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from typing import Any, cast

import anthropic
import httpx2  # the transport the anthropic SDK is built on; its read errors escape the SDK
import orjson

from app.observe.loop_passes import note as note_pass
from app.observe.loop_passes import off_loop
from app.providers.base import (
    CONNECT_TIMEOUT_S,
    AssistantMessage,
    ErrorKind,
    Finish,
    FinishReason,
    Image,
    Message,
    ModelRequest,
    ProviderError,
    ProviderEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolResultMessage,
    UsageEvent,
    UserMessage,
    cache_control,
    coalesced,
)
from app.providers.encoded_history import MessageFragments
from app.providers.errors import PhraseTable, classify_http_error, classify_stream_error, redact
from app.providers.messages_sse import Event, MessagesEventDecoder
from app.providers.openai_chat import encode_body
from app.providers.usage import usage_from_anthropic
from app.security.outbound import NO_SCAN, OutboundScan

# ---------------------------------------------------------------------------- request body


def _mark(blocks: list[dict[str, Any]], ttl: str) -> None:
    # The marker goes on the last block emitted so far. When the marked item itself produced
    # no block (empty text), that is the block ending the very same prefix, so the
    # breakpoint lands where it was asked for instead of being dropped.
    if blocks:
        blocks[-1]["cache_control"] = cache_control(ttl)


def _tool_input(arguments: str) -> dict[str, Any]:
    # The API rejects a tool_use whose input is not an object. The loop repairs arguments
    # before persisting, so reaching here unparseable is rare; `{}` keeps the request valid.
    try:
        parsed = json.loads(arguments) if arguments else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


PHRASES: PhraseTable = (
    # Exhausted credit arrives as a plain 400 invalid_request_error: a bad request to the
    # generic rules, yet another key or route would succeed.
    ("credit balance is too low", "auth"),
    ("overloaded_error", "overloaded"),
    ("prompt is too long", "context_overflow"),
    ("rate_limit_error", "rate_limited"),
    ("authentication_error", "auth"),
    ("permission_error", "auth"),
)
"""How the Messages API names faults the status alone does not tell apart."""

INSTRUCTION_PREFIX = "[Instruction from the application, not the user]\n"
GREETING_CUE = "[The conversation starts now: follow your instructions.]"
"""The Messages API needs a first user turn; a greeting request (instructions only) has none."""

_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh"}


def _image_block(image: Image) -> dict[str, Any]:
    if image.url:
        return {"type": "image", "source": {"type": "url", "url": image.url}}
    source = {"type": "base64", "media_type": image.media_type, "data": image.data}
    return {"type": "image", "source": source}


def _tool_choice(request: ModelRequest) -> dict[str, Any] | None:
    choice = request.tool_choice
    out: dict[str, Any]
    if choice == "auto":
        if request.parallel_tool_calls is not False:
            return None
        out = {"type": "auto"}
    elif choice == "none":
        return {"type": "none"}
    elif choice == "required":
        out = {"type": "any"}
    else:
        out = {"type": "tool", "name": choice}
    if request.parallel_tool_calls is False:
        out["disable_parallel_tool_use"] = True
    return out


def _output_config(request: ModelRequest) -> dict[str, Any] | None:
    config: dict[str, Any] = {}
    output = request.output_format
    if output is not None:
        schema = output.schema if output.kind == "json_schema" else None
        config["format"] = {"type": "json_schema", "schema": schema or {"type": "object"}}
    effort = _EFFORT.get(request.sampling.reasoning_effort or "")
    if effort is not None:
        config["effort"] = effort
    return config or None


def _blocks(message: Message, ttl: str) -> tuple[str, list[dict[str, Any]]]:
    """(role, content blocks) of one message; never an empty text block (the API 400s)."""
    match message:
        case UserMessage(content=text, prefix_cache_at=cut) if cut and 0 < cut < len(text):
            # A registered scaffold: its prefix is cached, the volatile tail is not.
            head: dict[str, Any] = {"type": "text", "text": text[:cut]}
            head["cache_control"] = cache_control(ttl)
            return "user", [head, {"type": "text", "text": text[cut:]}]
        case UserMessage(content=text, instruction=True):
            # No system role inside a Messages transcript: the instruction rides as user
            # text, labelled so the model reads it as the application's, not the user's.
            return "user", [{"type": "text", "text": INSTRUCTION_PREFIX + text}]
        case UserMessage(content=text, images=images) if images:
            pictures = [_image_block(image) for image in images]
            return "user", pictures + ([{"type": "text", "text": text}] if text else [])
        case UserMessage(content=text):
            return "user", [{"type": "text", "text": text}] if text else []
        case ToolResultMessage(
            tool_call_id=call_id, content=text, is_error=is_error, images=images
        ):
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
            if images:
                # The Messages API takes image blocks inside a tool_result, after its text.
                texts = [{"type": "text", "text": text}] if text else []
                block["content"] = texts + [_image_block(image) for image in images]
            elif text:
                block["content"] = text
            if is_error:
                block["is_error"] = True
            return "user", [block]
        case AssistantMessage(content=text, tool_calls=calls):
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            blocks += [
                {
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    "input": _tool_input(call.arguments),
                }
                for call in calls
            ]
            return "assistant", blocks


def build_messages_body(request: ModelRequest, *, default_max_tokens: int = 8192) -> dict[str, Any]:
    """The exact JSON body for `POST /v1/messages` (minus `stream`); a pure function."""
    ttl = request.cache_ttl
    system: list[dict[str, Any]] = []
    for system_block in request.system:
        if system_block.text:
            system.append({"type": "text", "text": system_block.text})
        if system_block.cache:
            _mark(system, ttl)

    turns: list[dict[str, Any]] = []
    if not request.messages or request.messages[0].kind != "user":
        turns.append({"role": "user", "content": [{"type": "text", "text": GREETING_CUE}]})
    for message in request.messages:
        role, blocks = _blocks(message, ttl)
        if blocks:
            # Anthropic requires strict user/assistant alternation and wants every result of
            # one assistant turn in the single user turn after it; tool results are user
            # content here, so consecutive results (and a user note after them) share a turn.
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"].extend(blocks)
            else:
                turns.append({"role": role, "content": blocks})
        if message.cache and turns:
            _mark(turns[-1]["content"], ttl)

    sampling = request.sampling
    body: dict[str, Any] = {
        "model": request.model,
        # Required by the API; the other wire shape lets the server pick.
        "max_tokens": sampling.max_tokens
        if sampling.max_tokens is not None
        else default_max_tokens,
        "messages": turns,
    }
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [
            {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
            for tool in request.tools
        ]
        # `none` keeps the schemas: a transcript holding tool_use blocks needs them defined.
        if (choice := _tool_choice(request)) is not None:
            body["tool_choice"] = choice
    if (config := _output_config(request)) is not None:
        body["output_config"] = config
    if sampling.user:
        body["metadata"] = {"user_id": sampling.user}
    if sampling.stop:
        body["stop_sequences"] = list(sampling.stop)
    if sampling.temperature is not None:
        body["temperature"] = sampling.temperature
    if sampling.top_p is not None:
        body["top_p"] = sampling.top_p
    return body


_SDK_ORDER = (
    *("max_tokens", "messages", "model", "cache_control", "container", "diagnostics"),
    *("inference_geo", "metadata", "output_config", "service_tier", "speed"),
    *("stop_sequences", "stream", "system", "thinking", "tool_choice", "tools"),
)
"""The body keys of the SDK's typed `messages.create`, in its order (an `extra_body` key
it names takes that place); the rest follow in ours. Kept, so the bytes upstream did not
change when the adapter stopped calling it (tests/test_anthropic_lean_wire.py)."""

_FRAGMENTS = MessageFragments()
_SPLICED = ("max_tokens", "messages")
_GREETING_BLOCK = orjson.dumps({"type": "text", "text": GREETING_CUE})


def _sdk_ordered(body: dict[str, Any]) -> dict[str, Any]:
    ordered = {key: body[key] for key in _SDK_ORDER if key in body}
    ordered.update(body)  # keys already placed keep their place; the others come after
    return ordered


def full_messages_body(request: ModelRequest, *, default_max_tokens: int = 8192) -> bytes:
    """The streamed call's body encoded whole: `build_messages_body` plus `stream`."""
    body = build_messages_body(request, default_max_tokens=default_max_tokens)
    body["stream"] = True
    return encode_body(_sdk_ordered(body))


def _message_blocks(message: Message, ttl: str) -> bytes:
    """One message's content blocks as encoded JSON, without the brackets (b"" for none)."""
    _, blocks = _blocks(message, ttl)
    if message.cache:
        _mark(blocks, ttl)
    return orjson.dumps(blocks)[1:-1] if blocks else b""


def _fragment_key(request: ModelRequest, scan: OutboundScan) -> tuple[str | int, str, int]:
    """Which earlier call's encodings this one is compared with: the session's, else the
    conversation's with the same first message object; and which scan searched them (under
    another, they were not searched for this one's secrets)."""
    messages = request.messages
    conversation = (request.prompt_cache_key or id(messages[0])) if messages else 0
    return (conversation, request.cache_ttl, scan.serial)


def encode_messages_body(
    request: ModelRequest, *, default_max_tokens: int = 8192, scan: OutboundScan = NO_SCAN
) -> bytes:
    """`full_messages_body(request)`, without re-encoding the messages an earlier call of
    the same conversation already encoded, and searched by `scan` (SecretInRequest) in
    what was not searched before.

    Consecutive messages of one role share a turn on this wire, so what is kept per
    message is its blocks; the turns are spliced from them. Compact JSON of a list is its
    items' encodings joined by commas, so the bytes are the same as a whole encode.
    """
    messages, ttl = request.messages, request.cache_ttl
    try:
        parts = _FRAGMENTS.encoded(
            messages,
            _fragment_key(request, scan),
            lambda message: _message_blocks(message, ttl),
            scan.check_pieces,
        )
        shell = build_messages_body(
            replace(request, messages=()), default_max_tokens=default_max_tokens
        )
        shell["stream"] = True
        ordered = _sdk_ordered(shell)
        rest = orjson.dumps({k: v for k, v in ordered.items() if k not in _SPLICED})
        head = orjson.dumps({"max_tokens": shell["max_tokens"]})[:-1]
    except TypeError:
        return _whole(request, default_max_tokens, scan)
    if any(message.cache and not part for message, part in zip(messages, parts, strict=True)):
        # A marker on a message without blocks lands on the block before it, which another
        # message's fragment holds: rare enough to build the body whole.
        return _whole(request, default_max_tokens, scan)
    scan.check_pieces([head, rest])
    turns: list[bytes] = []
    content: list[bytes] = []
    role = ""
    if not messages or messages[0].kind != "user":
        role, content = "user", [_GREETING_BLOCK]
    for message, part in zip(messages, parts, strict=True):
        if not part:
            continue
        speaker = "assistant" if message.kind == "assistant" else "user"
        if speaker != role and content:
            turns.append(b'{"role":"%s","content":[%s]}' % (role.encode(), b",".join(content)))
            content = []
        role = speaker
        content.append(part)
    if content:
        turns.append(b'{"role":"%s","content":[%s]}' % (role.encode(), b",".join(content)))
    # `rest` is never empty: it holds the model.
    body = b"".join((head, b',"messages":[', b",".join(turns), b"],", rest[1:]))
    scan.check_joined(body)
    return body


def _whole(request: ModelRequest, default_max_tokens: int, scan: OutboundScan) -> bytes:
    body = full_messages_body(request, default_max_tokens=default_max_tokens)
    scan.check(body)
    return body


def _check_body(request: ModelRequest, body: bytes, *, default_max_tokens: int) -> None:
    if body != full_messages_body(request, default_max_tokens=default_max_tokens):
        raise AssertionError("the spliced upstream body differs from a full encode")


# ---------------------------------------------------------------------------- accumulator

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}


@dataclass(slots=True)
class MessagesStreamState:
    """Folds raw Messages stream events (as dicts) into provider events; pure and testable.

    Usage is split across the stream: `message_start` carries input and cache counts,
    `message_delta` the final (cumulative) output count. Both are merged into one
    UsageEvent emitted by `finish()`, just before the Finish.
    """

    stop_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    _tool_index: dict[int, int] = field(default_factory=dict)
    """Anthropic content-block index -> our dense tool-call index."""

    def fold(self, event: Mapping[str, Any]) -> list[ProviderEvent]:
        kind = event.get("type")
        if kind == "message_start":
            self._merge_usage((event.get("message") or {}).get("usage"))
        elif kind == "content_block_start":
            return self._block_start(event.get("index", 0), event.get("content_block") or {})
        elif kind == "content_block_delta":
            return self._block_delta(event.get("index", 0), event.get("delta") or {})
        elif kind == "message_delta":
            reason = (event.get("delta") or {}).get("stop_reason")
            if reason:
                self.stop_reason = str(reason)
            self._merge_usage(event.get("usage"))
        return []

    def _merge_usage(self, usage: Any) -> None:
        if isinstance(usage, Mapping):
            # Later counts are cumulative, so they overwrite; a null means "not reported
            # here", never zero, so it must not erase the start event's input counts.
            self.usage.update({key: value for key, value in usage.items() if value is not None})

    def _block_start(self, index: int, block: Mapping[str, Any]) -> list[ProviderEvent]:
        block_type = block.get("type")
        if block_type == "tool_use":
            ours = len(self._tool_index)
            self._tool_index[index] = ours
            return [ToolCallDelta(index=ours, id=block.get("id"), name=block.get("name"))]
        if block_type == "text" and block.get("text"):
            return [TextDelta(block["text"])]
        if block_type == "thinking" and block.get("thinking"):
            return [ReasoningDelta(block["thinking"])]
        return []

    def _block_delta(self, index: int, delta: Mapping[str, Any]) -> list[ProviderEvent]:
        delta_type = delta.get("type")
        if delta_type == "text_delta" and delta.get("text"):
            return [TextDelta(delta["text"])]
        if delta_type == "thinking_delta" and delta.get("thinking"):
            return [ReasoningDelta(delta["thinking"])]
        if delta_type == "input_json_delta" and delta.get("partial_json"):
            ours = self._tool_index.get(index)
            if ours is not None:
                return [ToolCallDelta(index=ours, arguments=delta["partial_json"])]
        # signature and citation deltas are display/verification state we do not replay.
        return []

    def finish(self) -> list[ProviderEvent]:
        """The closing events; raises `stream_dropped` when the stream never said why it ended."""
        if self.stop_reason is None:
            raise ProviderError("stream_dropped", "upstream stream ended without a stop_reason")
        events: list[ProviderEvent] = []
        if self.usage:
            raw = dict(self.usage)
            events.append(UsageEvent(usage=usage_from_anthropic(raw), raw=raw))
        events.append(Finish(_STOP_REASONS.get(self.stop_reason, "stop")))
        return events


# ---------------------------------------------------------------------------- errors


def _connect_failed(exc: anthropic.APITimeoutError) -> bool:
    """The SDK raises its timeout `from` the transport's: a connect or pool timeout."""
    return isinstance(exc.__cause__, httpx2.ConnectTimeout | httpx2.PoolTimeout)


def map_sdk_error(exc: anthropic.AnthropicError, *, secret: str | None = None) -> ProviderError:
    """The SDK's exception as our taxonomy, through the same classifier as the other wire."""
    if isinstance(exc, anthropic.APIStatusError):
        if exc.status_code < 400:
            # An `event: error` frame inside a 200 stream: only its body knows what happened.
            return classify_stream_error(exc.body, secret=secret, phrases=PHRASES)
        body = exc.body
        if isinstance(body, str):
            body_text = body
        elif body is not None:
            body_text = json.dumps(body, default=str)
        else:
            body_text = exc.message
        return classify_http_error(
            exc.status_code, body_text, exc.response.headers, secret=secret, phrases=PHRASES
        )
    if isinstance(exc, anthropic.APITimeoutError):
        # The SDK raises it for any timeout; a connect timeout is still a connection fault.
        kind: ErrorKind = "connection" if _connect_failed(exc) else "timeout"
        return ProviderError(kind, redact(f"{type(exc).__name__}: {exc}", secret))
    if isinstance(exc, anthropic.APIConnectionError):
        return ProviderError("connection", redact(f"{type(exc).__name__}: {exc}", secret))
    return ProviderError("server_error", redact(f"{type(exc).__name__}: {exc}", secret))


# ---------------------------------------------------------------------------- provider


class AnthropicProvider:
    """Streams `POST {base_url}/v1/messages`; `base_url` excludes `/v1`, as in the SDK.

    The SDK stays the client (its headers, auth, timeouts and typed errors), but the body
    goes out pre-encoded and the reply comes back as the raw response: its typed call
    encoded the body with the stdlib encoder on every call and built a pydantic model of
    every stream event, which was dumped straight back to the dict the fold reads; that
    cost several times the OpenAI wire's CPU per chunk (benchmarks/anthropic_wire.py).
    """

    # Seed, penalties and logit bias have no Messages equivalent; service tiers differ.
    passthrough = frozenset({"reasoning_effort", "user"})
    prefill = True

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float = 600,
        default_max_tokens: int = 8192,
        http_client: httpx2.AsyncClient | None = None,
        outbound: OutboundScan = NO_SCAN,
    ) -> None:
        self._api_key = api_key
        self._outbound = outbound
        """Searched on every body before it is sent (app/security/outbound.py)."""
        self._default_max_tokens = default_max_tokens
        self._owns_client = http_client is None
        # Credentials are exactly what configuration says: without a key the SDK would go
        # looking in the environment and profile files, so pass an empty one and omit the
        # header instead (keyless local gateways).
        headers = None if api_key else cast(dict[str, str], {"Authorization": anthropic.Omit()})
        self._client = anthropic.AsyncAnthropic(
            base_url=base_url,
            api_key=api_key or "",
            max_retries=0,
            # A float here would make the connect wait the whole read timeout (10 minutes).
            timeout=httpx2.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_S)),
            default_headers=headers,
            http_client=http_client,
        )

    def _body(self, request: ModelRequest, unencoded: int) -> bytes:
        note_pass("encode", unencoded)
        body = encode_messages_body(
            request, default_max_tokens=self._default_max_tokens, scan=self._outbound
        )
        if os.environ.get("COURIER_VERIFY_LIVE_LOG") == "1":
            # Tests: the spliced body must equal a full build and encode of the request.
            _check_body(request, body, default_max_tokens=self._default_max_tokens)
        return body

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        unencoded = _FRAGMENTS.unencoded(request.messages, _fragment_key(request, self._outbound))
        # A long conversation's body, when most of it is not kept encoded (its first call),
        # is encoded on a worker; a short one costs less than the hop.
        body = await off_loop(unencoded, lambda: self._body(request, unencoded))
        try:
            # `post` with bytes is the SDK's supported way to send a body it did not
            # build; `cast_to=httpx2.Response` with `stream=True` hands back the response
            # unread, after the SDK has turned any error status into its typed error.
            response = await self._client.post(
                "/v1/messages", cast_to=httpx2.Response, content=body, stream=True
            )
        except anthropic.AnthropicError as exc:
            raise map_sdk_error(exc, secret=self._api_key) from None
        state = MessagesStreamState()
        decoder = MessagesEventDecoder()
        try:
            async for chunk in response.aiter_bytes():
                # What arrived in one read goes on as it came, its text runs joined.
                for out in coalesced(self._fold(state, decoder.feed(chunk))):
                    yield out
            for out in coalesced(self._fold(state, decoder.close())):
                yield out
        except httpx2.HTTPError as exc:
            # Output may already be out; whatever cut the body mid-way, it is a dropped stream
            # (or, when the upstream merely went silent, a timeout).
            message = redact(f"{type(exc).__name__}: {exc}", self._api_key)
            silent = isinstance(exc, httpx2.ReadTimeout)
            raise ProviderError("timeout" if silent else "stream_dropped", message) from None
        finally:
            await response.aclose()
        for out in state.finish():
            yield out

    def _fold(self, state: MessagesStreamState, read: list[Event]) -> list[ProviderEvent]:
        """One read's events folded, read as the SDK's own stream reads them: `ping` and
        unnamed events skipped, `event: error` raised with its body."""
        events: list[ProviderEvent] = []
        for name, data in read:
            if (event := self._event(name, data)) is not None:
                events += state.fold(event)
        return events

    def _event(self, name: str | None, data: bytes | str) -> dict[str, Any] | None:
        if name is None or name == "ping":
            return None
        if name == "error":
            # An `event: error` frame inside a 200 stream: only its body knows what
            # happened; as the SDK did, a body that is not JSON is classified by its text.
            body: Any = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
            with suppress(orjson.JSONDecodeError):
                body = orjson.loads(data)
            raise classify_stream_error(body, secret=self._api_key, phrases=PHRASES)
        if not data:
            return None
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            # The SDK let its JSON error escape here, which ended the turn as our own
            # internal error; a garbled upstream stream is the upstream's fault.
            raise ProviderError(
                "stream_dropped", f"upstream sent an unparseable {name!r} event"
            ) from None
        if not isinstance(event, dict):
            raise ProviderError("stream_dropped", f"upstream sent a non-object {name!r} event")
        return event

    async def aclose(self) -> None:
        # A shared client belongs to the pool that lent it (app/providers/clients.py).
        if self._owns_client:
            await self._client.close()
