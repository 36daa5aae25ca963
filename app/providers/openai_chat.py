"""Adapter for the OpenAI Chat Completions wire shape, spoken over plain httpx.

One adapter serves OpenAI, OpenRouter, vLLM, Ollama, llama.cpp and LM Studio, so every
quirk below is a tolerance of the union of their streams (documented where it lives), not
a per-vendor branch. The SDK is not used: we need byte control over the request (cache
contract) and must survive streams the SDK's models reject.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncGenerator, AsyncIterator, Hashable, Sequence
from contextlib import aclosing, suppress
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import orjson

from app.observe.loop_passes import is_long
from app.observe.loop_passes import note as note_pass
from app.providers.base import (
    CONNECT_TIMEOUT_S,
    SAMPLING_FIELDS,
    AssistantMessage,
    ErrorKind,
    Finish,
    FinishReason,
    Image,
    Message,
    ModelRequest,
    OutputFormat,
    ProviderError,
    ProviderEvent,
    ReasoningDelta,
    SamplingParams,
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
from app.providers.sse_decoder import SSEDecoder, SSEEvent
from app.providers.transport import Pieces, body_chunks, send_streaming
from app.providers.usage import usage_from_openai
from app.security.outbound import NO_SCAN, OutboundScan

log = logging.getLogger(__name__)

PHRASES: PhraseTable = (
    # An exhausted billing quota comes as 429 but no wait fixes it: another key might.
    ("insufficient_quota", "auth"),
    ("billing_hard_limit_reached", "auth"),
    ("invalid_api_key", "auth"),
    ("model_not_found", "not_found"),
    ("context_length_exceeded", "context_overflow"),
    ("tokens per min", "rate_limited"),
    ("requests per min", "rate_limited"),
)
"""How OpenAI-compatible servers name faults the status alone does not tell apart."""

# ---------------------------------------------------------------------------- request body


def _text_parts(text: str, *, cache: bool, ttl: str) -> list[dict[str, Any]]:
    part: dict[str, Any] = {"type": "text", "text": text}
    if cache:
        part["cache_control"] = cache_control(ttl)
    return [part]


def _system_message(request: ModelRequest, *, cache_markers: bool) -> dict[str, Any] | None:
    blocks = [block for block in request.system if block.text]
    if not blocks:
        return None
    if not cache_markers:
        return {"role": "system", "content": "\n\n".join(block.text for block in blocks)}
    parts: list[dict[str, Any]] = []
    for block in blocks:
        parts += _text_parts(block.text, cache=block.cache, ttl=request.cache_ttl)
    return {"role": "system", "content": parts}


def _content(text: str, *, cache: bool, cache_markers: bool, ttl: str) -> str | list[Any]:
    # Plain strings unless a marker must ride on the message: most local servers reject or
    # mangle array content, so the array form is reserved for envelope routes that need it.
    if cache_markers and cache and text:
        return _text_parts(text, cache=True, ttl=ttl)
    return text


def _message(message: Message, *, cache_markers: bool, ttl: str) -> dict[str, Any]:
    match message:
        case UserMessage(content=text, cache=cache, prefix_cache_at=cut) if (
            cache_markers and cut and 0 < cut < len(text)
        ):
            # A registered scaffold: its prefix is cached, the volatile tail is not.
            parts = _text_parts(text[:cut], cache=True, ttl=ttl)
            parts += _text_parts(text[cut:], cache=cache, ttl=ttl)
            return {"role": "user", "content": parts}
        case UserMessage(content=text, instruction=True):
            # Chat completions accepts a system message anywhere in the conversation.
            return {"role": "system", "content": text}
        case UserMessage(content=text, cache=cache, images=images) if images:
            items: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            items += [{"type": "image_url", "image_url": {"url": _image_url(i)}} for i in images]
            if cache_markers and cache:
                items[-1]["cache_control"] = cache_control(ttl)
            return {"role": "user", "content": items}
        case UserMessage(content=text, cache=cache):
            content = _content(text, cache=cache, cache_markers=cache_markers, ttl=ttl)
            return {"role": "user", "content": content}
        case ToolResultMessage(tool_call_id=call_id, content=text, cache=cache):
            content = _content(text, cache=cache, cache_markers=cache_markers, ttl=ttl)
            return {"role": "tool", "tool_call_id": call_id, "content": content}
        case AssistantMessage(content=text, tool_calls=calls, cache=cache):
            out: dict[str, Any] = {"role": "assistant"}
            if calls:
                # An assistant turn that only calls tools carries `content: null`; an empty
                # string is rejected by some strict servers and re-tokenised by others.
                # A cache marker cannot ride on tool calls, so such a turn loses its
                # breakpoint rather than gaining invented text.
                out["content"] = (
                    _content(text, cache=cache, cache_markers=cache_markers, ttl=ttl)
                    if text
                    else None
                )
                out["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in calls
                ]
            else:
                out["content"] = _content(
                    text or "", cache=cache, cache_markers=cache_markers, ttl=ttl
                )
            return out


TOOL_IMAGES_NOTE = "(the images the tool results above returned)"
"""The text before the images a run of tool results returned, so the model does not read
them as the user's."""


def _chat_messages(
    messages: Sequence[Message], *, cache_markers: bool, ttl: str
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    held: list[Image] = []
    for at, message in enumerate(messages):
        out.append(_message(message, cache_markers=cache_markers, ttl=ttl))
        if not isinstance(message, ToolResultMessage):
            continue
        held += message.images
        after = messages[at + 1] if at + 1 < len(messages) else None
        if held and not isinstance(after, ToolResultMessage):
            # A tool message takes text only here, and an assistant's tool calls must be
            # followed by all their results before any other message (a 400 otherwise):
            # the run's images follow it as one user message.
            out.append(_tool_images(held))
            held = []
    return out


def _tool_images(images: Sequence[Image]) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"type": "text", "text": TOOL_IMAGES_NOTE}]
    items += [{"type": "image_url", "image_url": {"url": _image_url(i)}} for i in images]
    return {"role": "user", "content": items}


class _NeedsNeighbours(Exception):
    """A tool result with images: its encoding depends on the messages after it, which a
    message's kept fragment cannot (`MessageFragments.encoded`), so the body is built
    whole instead."""


def _image_url(image: Image) -> str:
    return image.url or f"data:{image.media_type};base64,{image.data}"


def _tool_choice(choice: str) -> str | dict[str, Any]:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def _response_format(output: OutputFormat) -> dict[str, Any]:
    if output.kind == "json_object":
        return {"type": "json_object"}
    schema: dict[str, Any] = {"name": output.name, "schema": output.schema or {}}
    if output.strict:
        schema["strict"] = True
    return {"type": "json_schema", "json_schema": schema}


def _sampling(body: dict[str, Any], sampling: SamplingParams) -> None:
    if sampling.temperature is not None:
        body["temperature"] = sampling.temperature
    if sampling.top_p is not None:
        body["top_p"] = sampling.top_p
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if sampling.max_tokens is not None:
        # `max_tokens`, not `max_completion_tokens`: every compatible server reads the old
        # name, only OpenAI itself reads the new one (and still accepts the old for chat).
        body["max_tokens"] = sampling.max_tokens
    for name in ("seed", "frequency_penalty", "presence_penalty", "reasoning_effort"):
        if (value := getattr(sampling, name)) is not None:
            body[name] = value
    if sampling.logit_bias:
        body["logit_bias"] = dict(sampling.logit_bias)
    if sampling.service_tier is not None:
        body["service_tier"] = sampling.service_tier
    if sampling.user is not None:
        body["user"] = sampling.user
    if sampling.metadata:
        body["metadata"] = dict(sampling.metadata)


def build_chat_body(request: ModelRequest, *, cache_markers: bool = False) -> dict[str, Any]:
    """The exact JSON body for `POST /chat/completions`; a pure function of the request."""
    messages: list[dict[str, Any]] = []
    system = _system_message(request, cache_markers=cache_markers)
    if system is not None:
        messages.append(system)
    messages += _chat_messages(request.messages, cache_markers=cache_markers, ttl=request.cache_ttl)
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in request.tools
        ]
        if request.tool_choice != "auto":
            body["tool_choice"] = _tool_choice(request.tool_choice)
        if request.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.output_format is not None:
        body["response_format"] = _response_format(request.output_format)
    _sampling(body, request.sampling)
    if request.prompt_cache_key:
        body["prompt_cache_key"] = request.prompt_cache_key
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    return body


def _is_silence(exc: httpx.HTTPError) -> bool:
    """The upstream answered the connection, then went quiet past the read timeout."""
    return isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout)


def _transport_kind(exc: httpx.HTTPError) -> ErrorKind:
    # A connect or pool timeout never reached a listening upstream: a connection fault.
    return "timeout" if _is_silence(exc) else "connection"


def encode_body(body: dict[str, Any]) -> bytes:
    """The body as compact UTF-8 JSON, the same bytes httpx's `json=` would send.

    orjson, because the stdlib encoder costs milliseconds per call on a long session's
    body and the whole body is re-encoded on every upstream call.
    """
    try:
        return orjson.dumps(body)
    except TypeError:
        # orjson refuses integers past 64 bits, which json accepts: fall back rather than
        # fail a turn over an exotic tool schema.
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class _Fragments:
    """The OpenAI wire's kept message encodings (app/providers/encoded_history.py), keyed by
    which earlier call to compare with: the session (`prompt_cache_key`), else the first
    message (a compaction summary whose cached prefix the planner splits is a new object
    on every call, so it cannot be the key of a session), and the marker settings the
    encodings depend on."""

    def __init__(self) -> None:
        self._kept = MessageFragments()

    @staticmethod
    def _key(request: ModelRequest, cache_markers: bool, scan: OutboundScan) -> Hashable:
        # The scan's serial: fragments kept under another scan were not searched by this one.
        conversation = request.prompt_cache_key or id(request.messages[0])
        return (conversation, cache_markers, request.cache_ttl, scan.serial)

    def unencoded(self, request: ModelRequest, cache_markers: bool, scan: OutboundScan) -> int:
        """How many of `messages` the next `encoded` must encode: those not the same object
        at the same position as in the previous call (all of them after a rebuild)."""
        messages = request.messages
        if not is_long(len(messages)):
            return len(messages)  # short: worth no comparison, it stays where it is
        return self._kept.unencoded(messages, self._key(request, cache_markers, scan))

    def encoded(
        self, request: ModelRequest, cache_markers: bool, scan: OutboundScan
    ) -> list[bytes]:
        """The messages' encodings, each new one searched by `scan` before it is kept."""
        if not request.messages:
            return []
        ttl = request.cache_ttl

        def encode(message: Message) -> bytes:
            if isinstance(message, ToolResultMessage) and message.images:
                raise _NeedsNeighbours
            return orjson.dumps(_message(message, cache_markers=cache_markers, ttl=ttl))

        key = self._key(request, cache_markers, scan)
        note_pass("encode", self.unencoded(request, cache_markers, scan))
        return self._kept.encoded(request.messages, key, encode, scan.check_pieces)


_FRAGMENTS = _Fragments()


def encode_chat_body(
    request: ModelRequest, *, cache_markers: bool = False, scan: OutboundScan = NO_SCAN
) -> bytes:
    """`encode_body(build_chat_body(request))`, without re-encoding every message, and
    searched by `scan` (SecretInRequest) in what was not searched before."""
    return b"".join(encode_chat_pieces(request, cache_markers=cache_markers, scan=scan))


SPLICED_APART = 16 * 1024
"""Fragments at least this long are sent as pieces of their own (`encode_chat_pieces`);
shorter runs are joined, so a body of thousands of short messages stays a few pieces."""


def encode_chat_pieces(
    request: ModelRequest, *, cache_markers: bool = False, scan: OutboundScan = NO_SCAN
) -> list[bytes]:
    """`encode_chat_body` as pieces whose concatenation is the body, not joined.

    The messages are spliced into the encoded envelope as remembered fragments; compact
    JSON of a list is its items' encodings joined by commas, so the bytes are the same.
    A long fragment (a 40 KB tool output) is left a piece of its own: the transport writes
    the pieces as they are (`transport.Pieces`), where joining them copied the whole body
    (2 MB by turn 40 of a session reading 40 KB files) twice per upstream call.
    """
    try:
        shell = build_chat_body(replace(request, messages=()), cache_markers=cache_markers)
        envelope = [orjson.dumps(m) for m in shell["messages"]]
        parts = _FRAGMENTS.encoded(request, cache_markers, scan)
        rest = orjson.dumps({k: v for k, v in shell.items() if k not in ("model", "messages")})
        head = orjson.dumps({"model": shell["model"]})[:-1]
    except (TypeError, _NeedsNeighbours):
        # A session with tool images pays for a whole build on each call while they are in
        # its history; every other session keeps the spliced fragments.
        body = encode_body(build_chat_body(request, cache_markers=cache_markers))
        scan.check(body)
        return [body]
    tail = b"]," + rest[1:] if rest != b"{}" else b"]}"
    scan.check_pieces([head, *envelope, tail])
    items = [*envelope, *parts]
    long = [i for i, n in enumerate(map(len, items)) if n >= SPLICED_APART]
    pieces = [head + b',"messages":[']
    at = 0
    for i in long:
        if i > at:  # the run of short ones before it, and the comma after them
            pieces.append(b",".join(items[at:i]) + b",")
        pieces.append(items[i])
        at = i + 1
        if at < len(items):
            pieces.append(b",")
    pieces += [b",".join(items[at:]), tail]
    scan.check_joined_pieces(pieces)
    return pieces


def _check_body(request: ModelRequest, body: bytes, *, cache_markers: bool) -> None:
    full = encode_body(build_chat_body(request, cache_markers=cache_markers))
    if body != full:
        raise AssertionError("the spliced upstream body differs from a full encode")


DRAIN_AFTER_DONE_S = 2.0
"""How long to wait for the body's end after `[DONE]`: reading it lets httpx return the
connection to the pool; a server that holds the body open longer loses that connection."""


# ---------------------------------------------------------------------------- accumulator

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


@dataclass(slots=True)
class ChatStreamState:
    """Folds parsed chunks into provider events; pure, so it is tested without a socket.

    Finish and usage are held back until `finish()`: several servers send `finish_reason`
    in one chunk and the usage in a later one, and the contract puts usage before Finish.
    """

    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    tool_call_count: int = 0
    _wire_to_index: dict[int, int] = field(default_factory=dict)
    _ids: dict[int, str] = field(default_factory=dict)
    _names: dict[int, str] = field(default_factory=dict)
    _last_index: int | None = None

    def fold(self, chunk: dict[str, Any]) -> list[ProviderEvent]:
        events: list[ProviderEvent] = []
        self.fold_into(chunk, events)
        return events

    def fold_into(self, chunk: dict[str, Any], events: list[ProviderEvent]) -> None:
        """`fold`, appending to `events`: one list per read, not two per chunk."""
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            # Some servers repeat a cumulative usage on every chunk; the last one is final.
            self.usage = usage
        for choice in chunk.get("choices") or ():
            # Only the first choice is ours (n=1); a null index counts as the first.
            if not isinstance(choice, dict) or choice.get("index") not in (0, None):
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._fold_delta(delta, events)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def _fold_delta(self, delta: dict[str, Any], events: list[ProviderEvent]) -> None:
        # vLLM/DeepSeek/llama.cpp say `reasoning_content`, OpenRouter/Ollama say `reasoning`;
        # servers that send both send the same text, so only the first is taken.
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            events.append(ReasoningDelta(reasoning))
        content = delta.get("content")
        if isinstance(content, str) and content:
            events.append(TextDelta(content))
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                event = self._fold_tool_call(call)
                if event is not None:
                    events.append(event)

    def _fold_tool_call(self, call: dict[str, Any]) -> ToolCallDelta | None:
        call_id = call.get("id") or None
        index = self._index_for(call.get("index"), call_id)
        function = call.get("function") or {}
        name = function.get("name") or None
        arguments = function.get("arguments") or ""
        if not isinstance(arguments, str):
            # Ollama can hand over the arguments already parsed.
            arguments = json.dumps(arguments)
        # Some servers repeat id and name on every fragment; emit each once so a consumer
        # that concatenates never builds "read_fileread_file".
        if call_id is not None and index in self._ids:
            call_id = None
        elif call_id is not None:
            self._ids[index] = call_id
        if name is not None and index in self._names:
            name = None
        elif name is not None:
            self._names[index] = name
        if call_id is None and name is None and not arguments:
            return None
        return ToolCallDelta(index=index, id=call_id, name=name, arguments=arguments)

    def _index_for(self, wire_index: Any, call_id: str | None) -> int:
        """Our dense 0-based index for a fragment, tolerating missing or reused wire indexes."""
        if call_id is not None:
            for known_index, known in self._ids.items():
                if known == call_id:
                    self._last_index = known_index
                    return known_index
        if not isinstance(wire_index, int):
            # No index at all: a new id starts a new call, a bare fragment continues the last.
            if call_id is None and self._last_index is not None:
                return self._last_index
            return self._new_index()
        index = self._wire_to_index.get(wire_index)
        if index is None or (call_id is not None and index in self._ids):
            # A fresh id on a used index means the server numbers every call 0; split them.
            index = self._new_index()
            self._wire_to_index[wire_index] = index
        self._last_index = index
        return index

    def _new_index(self) -> int:
        index = self.tool_call_count
        self.tool_call_count += 1
        self._last_index = index
        return index

    def finish(self) -> list[ProviderEvent]:
        """The closing events; raises `stream_dropped` when no finish_reason ever came."""
        if self.finish_reason is None:
            raise ProviderError("stream_dropped", "upstream stream ended without finish_reason")
        reason = _FINISH_REASONS.get(self.finish_reason, "stop")
        if reason == "stop" and self.tool_call_count:
            # Ollama and some vLLM tool parsers report "stop" after emitting tool calls.
            reason = "tool_calls"
        events: list[ProviderEvent] = []
        if self.usage is not None:
            events.append(UsageEvent(usage=usage_from_openai(self.usage), raw=self.usage))
        events.append(Finish(reason))
        return events


def completion_events(body: dict[str, Any]) -> list[ProviderEvent]:
    """Events for a non-streamed JSON reply, from servers that ignore `stream: true`."""
    state = ChatStreamState()
    chunk = dict(body)
    chunk["choices"] = [
        {
            "index": choice.get("index", 0),
            "delta": {
                **(choice.get("message") or {}),
                "tool_calls": [
                    {**call, "index": position}
                    for position, call in enumerate(
                        (choice.get("message") or {}).get("tool_calls") or ()
                    )
                ],
            },
            "finish_reason": choice.get("finish_reason"),
        }
        for choice in body.get("choices") or ()
        if isinstance(choice, dict)
    ]
    return state.fold(chunk) + state.finish()


# ---------------------------------------------------------------------------- provider


async def _single(data: bytes) -> AsyncGenerator[bytes, None]:
    yield data


async def _drain(chunks: AsyncGenerator[bytes, None]) -> None:
    """Read what is left of a body (normally just its terminating chunk), briefly."""
    # The reply is complete at [DONE]; a timeout or a cut here only costs the connection.
    with suppress(TimeoutError, ProviderError):
        async with asyncio.timeout(DRAIN_AFTER_DONE_S):
            async for _ in chunks:
                pass


class OpenAIChatProvider:
    """Streams `POST {base_url}/chat/completions`; `base_url` includes `/v1`, as in the SDK."""

    passthrough = frozenset(SAMPLING_FIELDS)
    # OpenAI itself answers after a trailing assistant message instead of continuing it,
    # so prefill is opt-in per profile for servers that do continue (vLLM, llama.cpp).
    prefill = False

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float = 600,
        cache_markers: bool = False,
        extra_headers: dict[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
        outbound: OutboundScan = NO_SCAN,
    ) -> None:
        self._outbound = outbound
        """Searched on every body before it is sent (app/security/outbound.py)."""
        # Parsed once: httpx re-parses a string URL on every request (about 50 µs).
        self._url = httpx.URL(base_url.rstrip("/") + "/chat/completions")
        self._api_key = api_key
        self._cache_markers = cache_markers
        self._headers = {
            "Accept": "text/event-stream",
            "Content-Type": "application/json",
            **(extra_headers or {}),
        }
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._owns_client = http_client is None
        self._template: tuple[httpx.URL, list[tuple[bytes, bytes]], dict[str, Any]] | None = None
        # The read timeout bounds the silence between chunks, not the whole reply; connect
        # failures should surface fast so the retry layer can act.
        self._client = http_client or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_S))
        )

    def request_for(self, body: bytes | list[bytes]) -> httpx.Request:
        """The upstream request, from a template of what `build_request` makes.

        `build_request` merges the client's URL, headers, cookies and timeout on every call
        (about 120 µs); the template does that once and the request costs a quarter of it.
        Cookies can change between calls (a gateway's sticky session), so a client holding
        any takes the full build."""
        if self._client.cookies:
            content = body if isinstance(body, bytes) else b"".join(body)
            return self._client.build_request(
                "POST", self._url, content=content, headers=self._headers
            )
        if self._template is None:
            made = self._client.build_request("POST", self._url, content=b"", headers=self._headers)
            # The body's own length is set per request.
            kept = [(k, v) for k, v in made.headers.raw if k.lower() != b"content-length"]
            self._template = (made.url, kept, made.extensions)
        url, headers, extensions = self._template
        if isinstance(body, bytes):
            return httpx.Request(
                "POST", url, content=body, headers=headers, extensions=dict(extensions)
            )
        length = (b"Content-Length", b"%d" % sum(map(len, body)))
        return httpx.Request(
            "POST",
            url,
            headers=[*headers, length],
            stream=Pieces(body),
            extensions=dict(extensions),
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        unencoded = _FRAGMENTS.unencoded(request, self._cache_markers, self._outbound)
        # A long conversation's first body (10,000 messages) is encoded on a worker thread:
        # on the loop it held every other stream silent; a short one costs less than the hop.
        if is_long(unencoded):
            body = await asyncio.to_thread(self._body, request)
        else:
            body = self._body(request)
        http_request = self.request_for(body)
        try:
            response = await send_streaming(self._client, http_request)
        except httpx.HTTPError as exc:
            raise ProviderError(_transport_kind(exc), self._describe(exc)) from None
        try:
            if response.status_code >= 300:
                text = await self._read_error_body(response)
                raise classify_http_error(
                    response.status_code,
                    text,
                    response.headers,
                    secret=self._api_key,
                    phrases=PHRASES,
                )
            if "json" in response.headers.get("content-type", ""):
                events = self._json_reply(response)
            else:
                events = self._sse_events(self._body_chunks(response))
            # aclosing: a consumer that stops early must not leave generators to the GC.
            async with aclosing(events):
                async for event in events:
                    yield event
        finally:
            await response.aclose()

    def _body(self, request: ModelRequest) -> list[bytes]:
        body = encode_chat_pieces(request, cache_markers=self._cache_markers, scan=self._outbound)
        if os.environ.get("COURIER_VERIFY_LIVE_LOG") == "1":
            # Tests: the spliced body must equal a full build and encode of the request.
            _check_body(request, b"".join(body), cache_markers=self._cache_markers)
        return body

    async def _body_chunks(self, response: httpx.Response) -> AsyncGenerator[bytes, None]:
        try:
            async for chunk in body_chunks(response):
                yield chunk
        except httpx.HTTPError as exc:
            # Headers arrived, so the upstream accepted the call; losing the body mid-way is
            # a dropped stream (output may already be out), not a connection failure; a
            # silent one is a timeout (a hung upstream, not a cut connection).
            kind: ErrorKind = "timeout" if _is_silence(exc) else "stream_dropped"
            raise ProviderError(kind, self._describe(exc)) from None

    async def _sse_events(
        self, chunks: AsyncGenerator[bytes, None]
    ) -> AsyncGenerator[ProviderEvent, None]:
        decoder = SSEDecoder()
        state = ChatStreamState()
        async with aclosing(chunks):
            async for raw in chunks:
                events: list[ProviderEvent] = []
                done = False
                for sse in decoder.feed_data(raw):
                    if type(sse) is bytes:  # a plain `data:` event, as it arrived
                        if done := sse.strip() == b"[DONE]":
                            break
                        state.fold_into(self._parse_data(sse), events)
                        continue
                    assert isinstance(sse, SSEEvent)
                    if done := self._is_done(sse):
                        break
                    state.fold_into(self._parse(sse), events)
                # What arrived in one read goes on as it came, its text runs joined.
                for event in coalesced(events):
                    yield event
                if done:
                    # Returning here, before the chunked body's end, made httpx drop the
                    # connection: a new TCP (and TLS) handshake on every call.
                    await _drain(chunks)
                    for event in state.finish():
                        yield event
                    return
        for sse in decoder.close():
            if self._is_done(sse):
                break
            for event in state.fold(self._parse(sse)):
                yield event
        for event in state.finish():
            yield event

    async def _json_reply(self, response: httpx.Response) -> AsyncGenerator[ProviderEvent, None]:
        """A non-streamed reply from a server that ignored `stream: true`."""
        raw = b"".join([chunk async for chunk in self._body_chunks(response)])
        try:
            body = orjson.loads(raw)
        except ValueError:
            # Some servers label their SSE as JSON; read it as what it is.
            async for event in self._sse_events(_single(raw)):
                yield event
            return
        if not isinstance(body, dict):
            raise ProviderError("stream_dropped", "upstream sent a non-object JSON reply")
        if body.get("error"):
            raise classify_stream_error(body, secret=self._api_key, phrases=PHRASES)
        for event in completion_events(body):
            yield event

    @staticmethod
    def _is_done(sse: SSEEvent) -> bool:
        return sse.data.strip() == "[DONE]"

    def _parse(self, sse: SSEEvent) -> dict[str, Any]:
        """One chunk as a dict; raises the classified error for in-stream error frames."""
        if sse.event != "error":
            return self._parse_data(sse.data)
        try:
            error = orjson.loads(sse.data) if sse.data.strip() else {}
        except ValueError:
            log.warning("skipping unparseable stream chunk (%d bytes)", len(sse.data))
            return {}
        raise classify_stream_error(error, secret=self._api_key, phrases=PHRASES)

    def _parse_data(self, data: bytes | str) -> dict[str, Any]:
        """A plain event's data as a dict (`{}` for anything but an object); raises the
        classified error for an in-stream error object."""
        try:
            chunk = orjson.loads(data)
        except ValueError:
            if data.strip():
                log.warning("skipping unparseable stream chunk (%d bytes)", len(data))
            return {}
        if type(chunk) is not dict:
            return {}
        if chunk.get("error"):
            raise classify_stream_error(chunk, secret=self._api_key, phrases=PHRASES)
        return chunk

    @staticmethod
    async def _read_error_body(response: httpx.Response) -> str:
        try:
            return (await response.aread()).decode("utf-8", errors="replace")
        except httpx.HTTPError:
            return ""

    def _describe(self, exc: httpx.HTTPError) -> str:
        # httpx messages can carry the URL; keys never ride in it, but scrub anyway.
        return redact(f"{type(exc).__name__}: {exc}", self._api_key)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()
