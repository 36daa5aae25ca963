"""A chat turn as the client asked for it: one JSON completion, or SSE chunks.

Streams carry standard chunks only, and progress chunks for a client that opted in (the
pacing and keepalives are `app/api/http/sse.py`'s); the JSON path waits for the end and
cancels the turn if the client hangs up first (an SDK timeout), so its retry does not find
the first attempt still running tools beside it.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Set
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from app.agent.events import (
    ApprovalRequested,
    ApprovalResolved,
    ClientToolCalls,
    ToolFinished,
    ToolStarted,
    TurnError,
    TurnEvent,
    TurnFinished,
    TurnText,
)
from app.agent.turns.handle import TurnHandle
from app.api.chat.wire import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChunkChoice,
    CompletionTokensDetails,
    CourierCost,
    CourierUsage,
    Delta,
    FunctionCallOut,
    PromptTokensDetails,
    ResponseMessage,
    ToolCallOut,
    UsageOut,
)
from app.api.http.errors import ErrorBody, ErrorResponse
from app.api.http.hangup import outlasted
from app.api.http.sse import SSE_SEP, EventPosition, ServerSentEvent
from app.api.http.statuses import turn_error_status
from app.providers.base import ToolCall

_SENTINEL = "\x00courier-text\x00"
"""Cannot occur in a rendered model or id, so it marks the one place text goes."""


def usage_out(finished: TurnFinished) -> UsageOut:
    usage, cost = finished.usage, finished.cost
    return UsageOut(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        prompt_tokens_details=PromptTokensDetails(
            cached_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens
        ),
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=usage.reasoning_tokens),
        cost=cost.amount_float,
        courier=CourierUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            upstream_calls=finished.upstream_calls,
            routes=list(finished.routes),
            cost=CourierCost(
                amount_usd=str(cost.amount) if cost.amount is not None else None,
                status=cost.status,
                source=cost.source,
            ),
        ),
    )


def tool_event_payload(event: ToolStarted | ToolFinished) -> dict[str, Any]:
    """Name, call id, duration and outcome; never the arguments, which may hold secrets."""
    body: dict[str, Any] = {"call_id": event.call_id, "name": event.name}
    if isinstance(event, ToolStarted):
        body["type"] = "tool.started"
    else:
        body |= {
            "type": "tool.finished",
            "ok": not event.is_error,
            "duration_ms": round(event.duration_ms, 1),
        }
    if event.source:  # an MCP tool: which server answered
        body["source"] = event.source
    return body


def approval_event_payload(event: ApprovalRequested | ApprovalResolved) -> dict[str, Any]:
    """What an approver UI needs to act: the id to POST to, and what it would allow."""
    body: dict[str, Any] = {"approval_id": event.approval_id, "call_id": event.call_id}
    if isinstance(event, ApprovalRequested):
        body |= {
            "type": "approval.requested",
            "tool": event.name,
            "summary": event.summary,
            "expires_at": event.expires_at,
            "grantable": event.grantable,
        }
    else:
        body |= {"type": "approval.resolved", "status": event.status}
    return body


def error_payload(error: TurnError) -> dict[str, Any]:
    body = ErrorBody(message=error.message, type=error.type, param=None, code=error.code)
    return ErrorResponse(error=body).model_dump(mode="json")


def retry_headers(error: TurnError) -> dict[str, str]:
    """What the official SDKs read before retrying: `x-should-retry: false` for a failure a
    retry cannot fix or that followed a side effect, `Retry-After` for one that can pass."""
    if not error.retryable:
        return {"x-should-retry": "false"}
    after = max(1, int(error.retry_after or 1))
    return {"x-should-retry": "true", "Retry-After": str(min(after, 600))}


def _render_chunk(
    identity: tuple[str, int, str],
    include_usage: bool,
    choices: list[ChunkChoice],
    usage: UsageOut | None = None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    courier: dict[str, Any] | None = None,
) -> str:
    """One `chat.completion.chunk` as JSON text; `identity` is (id, created, model)."""
    completion_id, created, model = identity
    chunk = ChatCompletionChunk(
        id=completion_id, created=created, model=model, choices=choices, usage=usage
    )
    data = chunk.model_dump(mode="json", exclude={"choices"})
    # A delta carries only what changed: a repeated `role` would be concatenated by the
    # SDK's accumulator into "assistantassistant".
    data["choices"] = [
        {
            "index": c.index,
            "delta": c.delta.model_dump(exclude_none=True),
            "finish_reason": c.finish_reason,
        }
        for c in choices
    ]
    if tool_calls is not None:
        data["choices"][0]["delta"]["tool_calls"] = tool_calls
    if not include_usage:
        del data["usage"]
    if courier is not None:
        data["courier"] = courier
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


_ID_MARK = "chatcmpl-" + secrets.token_hex(12)
"""Stands for a completion's id in a template: the shape of one, never one."""
_CREATED_MARK = 4_102_444_800_321
"""Stands for its `created`: no frame is stamped this far in the future."""
TEMPLATED_MODEL_CHARS = 256
"""Model names up to this long get kept templates; a longer one (a client may send any
string) is rendered per frame rather than kept."""
_FRAMES: dict[tuple[str, bool, str], tuple[str, str, str]] = {}
_FRAMES_KEPT = 1024


def _frame_template(model: str, include_usage: bool, kind: str) -> tuple[str, str, str]:
    """A frame of this `kind` ("role", "text", or a finish reason) rendered once per model,
    cut around its id and created: (before the id, between them, after created). Every
    stream's role, text and finish frames come from these; building, dumping and encoding
    the models for each cost about 7 % of the event loop's work per request."""
    key = (model, include_usage, kind)
    found = _FRAMES.get(key)
    if found is not None:
        return found
    if kind == "role":
        choice = ChunkChoice(delta=Delta(role="assistant", content=""))
    elif kind == "text":
        choice = ChunkChoice(delta=Delta(content=_SENTINEL))
    else:
        choice = ChunkChoice(delta=Delta(), finish_reason=kind)
    whole = _render_chunk((_ID_MARK, _CREATED_MARK, model), include_usage, [choice])
    before, _, rest = whole.partition(_ID_MARK)
    between, _, after = rest.partition(str(_CREATED_MARK))
    template = (before, between, after)
    if len(model) <= TEMPLATED_MODEL_CHARS:
        if len(_FRAMES) >= _FRAMES_KEPT:
            _FRAMES.clear()  # a client cycling through model names: start over
        _FRAMES[key] = template
    return template


class CompletionRenderer:
    """One completion's identity: the same id, created and model on every chunk."""

    @classmethod
    def of(cls, request: ChatCompletionRequest, handle: TurnHandle) -> CompletionRenderer:
        """The renderer of `handle`'s completion as `request` asked for it."""
        options = request.stream_options
        renderer = cls(request.model, include_usage=bool(options and options.include_usage))
        renderer.adopt(handle)
        return renderer

    def __init__(self, model: str, *, include_usage: bool = False) -> None:
        self.id = "chatcmpl-" + secrets.token_hex(12)
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage
        self._text_frame: tuple[str, str] | None = None
        self._text_sse: tuple[bytes, bytes] | None = None

    def adopt(self, handle: TurnHandle) -> None:
        """Share one identity per turn: a reattached retry sees the same id and created."""
        if handle.completion_id:
            self.id, self.created = handle.completion_id, handle.created
            self._text_frame = self._text_sse = None  # the identity is in the templates
        else:
            handle.completion_id, handle.created = self.id, self.created

    def completion(
        self, text: str, finished: TurnFinished, calls: tuple[ToolCall, ...] = ()
    ) -> dict[str, Any]:
        tool_calls = [
            ToolCallOut(id=c.id, function=FunctionCallOut(name=c.name, arguments=c.arguments))
            for c in calls
        ]
        body = ChatCompletion(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=[
                Choice(
                    message=ResponseMessage(content=text or None, tool_calls=tool_calls or None),
                    finish_reason=finished.finish_reason,
                )
            ],
            usage=usage_out(finished),
        )
        data = body.model_dump(mode="json")
        if not tool_calls:
            del data["choices"][0]["message"]["tool_calls"]  # absent, not null, in the spec
        return data

    def _chunk(
        self,
        choices: list[ChunkChoice],
        usage: UsageOut | None = None,
        *,
        tool_calls: list[dict[str, Any]] | None = None,
        courier: dict[str, Any] | None = None,
    ) -> str:
        return _render_chunk(
            (self.id, self.created, self.model),
            self.include_usage,
            choices,
            usage,
            tool_calls=tool_calls,
            courier=courier,
        )

    def _templated(self, kind: str) -> str:
        before, between, after = _frame_template(self.model, self.include_usage, kind)
        return f"{before}{self.id}{between}{self.created}{after}"

    def role_chunk(self) -> str:
        return self._templated("role")

    def text_chunk(self, text: str) -> str:
        # Most frames of a stream are this one; building, dumping and re-encoding a model
        # per frame cost more than the rest of the frame's path. The template is that same
        # rendering, cut around a sentinel, so the bytes cannot drift from `_chunk`.
        head, tail = self._text_template()
        return head + _json_string(text) + tail

    def _text_template(self) -> tuple[str, str]:
        if self._text_frame is None:
            head, _, tail = self._templated("text").partition(json.dumps(_SENTINEL))
            self._text_frame = (head, tail)
        return self._text_frame

    def text_sse(self, text: str) -> bytes:
        """The whole SSE frame of `text_chunk(text)`, as `ServerSentEvent(data=...)`
        encodes it: the text's JSON goes from orjson straight into the frame's bytes, with
        no str round trip and no frame object (most of a stream's frames)."""
        if self._text_sse is None:
            head, tail = self._text_template()
            self._text_sse = (f"data: {head}".encode(), f"{tail}{SSE_SEP}{SSE_SEP}".encode())
        head_b, tail_b = self._text_sse
        try:
            return head_b + orjson.dumps(text) + tail_b
        except TypeError:  # a lone surrogate: escaped, as UTF-8 cannot carry it
            return head_b + json.dumps(text).encode() + tail_b

    def tool_call_chunks(self, calls: tuple[ToolCall, ...]) -> list[str]:
        """Client tool calls as the SDK accumulators expect: per call, in index order, one
        chunk with id, type and name (never repeated: they would be concatenated), then
        one with the arguments."""
        out: list[str] = []
        for index, call in enumerate(calls):
            head = {
                "index": index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            out.append(self._chunk([ChunkChoice(delta=Delta())], tool_calls=[head]))
            if call.arguments:
                args = {"index": index, "function": {"arguments": call.arguments}}
                out.append(self._chunk([ChunkChoice(delta=Delta())], tool_calls=[args]))
        return out

    def progress_chunk(self, payload: dict[str, Any]) -> str:
        """Opt-in progress as an ordinary chunk with an empty delta and a `courier` field:
        SDKs parse every data line as a chunk, so a named event would crash them, while an
        extra field is ignored (strict validation included)."""
        return self._chunk([ChunkChoice(delta=Delta())], courier=payload)

    def finish_chunk(self, finished: TurnFinished) -> str:
        return self._templated(finished.finish_reason)

    def usage_chunk(self, finished: TurnFinished) -> str:
        return self._chunk([], usage=usage_out(finished))


def _json_string(text: str) -> str:
    """`json.dumps(text, ensure_ascii=False)`, five times faster: orjson escapes every code
    point the same way (checked over all of them), but refuses a lone surrogate."""
    try:
        return orjson.dumps(text).decode()
    except TypeError:
        return json.dumps(text, ensure_ascii=False)


_IDS = 4096
_ID_LINES = tuple(f"id: {seq}{SSE_SEP}".encode() for seq in range(_IDS))
"""The id lines of a stream's first events, made once: most frames are text, and
formatting a line for each was a visible share of a fast stream's work."""


def _id_line(seq: int) -> bytes:
    return _ID_LINES[seq] if seq < _IDS else f"id: {seq}{SSE_SEP}".encode()


class ChatFrames:
    """A chat turn's events as `chat.completion.chunk` frames (`app/api/http/sse.py`'s
    `TurnFrames`); progress chunks only for a client that asked for them.

    Every frame carries an SSE `id`: the event's sequence number in the turn (what
    `/v1/sessions/{id}/events` numbers by), `N.k` for the k-th frame of an event written as
    several (the end: finish, usage, `[DONE]`), `0` for the role chunk. SDKs ignore the
    field; a client that lost the connection sends the last one back as `Last-Event-ID` on
    its retry and receives exactly the frames it missed (`resume`)."""

    head_waits = True  # the role chunk says nothing alone: it rides with the first bytes

    def __init__(
        self,
        renderer: CompletionRenderer,
        handle: TurnHandle,
        *,
        opted_in: Set[str] = frozenset(),
        resume: EventPosition | None = None,
    ) -> None:
        self.renderer = renderer
        self.handle = handle
        self.tool_events = "tools" in opted_in
        self.approval_events = "approvals" in opted_in
        if resume is None:
            self.head = _ID_LINES[0] + ServerSentEvent(data=renderer.role_chunk()).encode()
            self.after, self._skip = 0, 0
        else:  # the client has the role chunk (id 0) and everything up to its id
            self.head = b""
            self.after = resume.seq - 1 if resume.part else resume.seq
            self._skip = resume.part
        self.seq = self.after
        """The sequence number of the event last rendered; `after` is where it starts."""

    def frames(self, event: TurnEvent) -> bytes:
        seq = self.seq = self.seq + 1
        if type(event) is TurnText and not self._skip:  # most events: straight to bytes
            line = _ID_LINES[seq] if seq < _IDS else _id_line(seq)
            return line + self.renderer.text_sse(event.text)
        return self._numbered(self.event_frames(event))

    async def last(self, event: TurnFinished) -> bytes:
        self.handle.delivered = event.error is None
        return self.frames(event)

    def left(self) -> None:
        # Stop the work, unless an idempotency key lets a retry reattach within the grace
        # period (the handle knows).
        self.handle.abandon()

    def _numbered(self, frames: list[ServerSentEvent]) -> bytes:
        """The event's frames with their ids, less those a resuming client already read.
        The id line goes in front of each frame's bytes: where `ServerSentEvent` writes it
        for a frame with neither comment nor event name, as all of chat's are."""
        seq = self.seq
        if not frames:  # an event this client did not ask to see (a tool's progress)
            self._skip = 0
            return b""
        if len(frames) == 1:
            ids = [_id_line(seq)]
        else:
            ids = [f"id: {seq}.{part}{SSE_SEP}".encode() for part in range(1, len(frames) + 1)]
        skip, self._skip = self._skip, 0
        return b"".join(i + f.encode() for i, f in zip(ids[skip:], frames[skip:], strict=True))

    def event_frames(self, event: TurnEvent) -> list[ServerSentEvent]:
        """The frames one turn event becomes (none for events this client did not ask for)."""
        renderer = self.renderer
        if isinstance(event, TurnText):
            return [ServerSentEvent(data=renderer.text_chunk(event.text))]
        if isinstance(event, ClientToolCalls):
            return [ServerSentEvent(data=c) for c in renderer.tool_call_chunks(event.calls)]
        if self.tool_events and isinstance(event, ToolStarted | ToolFinished):
            return [ServerSentEvent(data=renderer.progress_chunk(tool_event_payload(event)))]
        if self.approval_events and isinstance(event, ApprovalRequested | ApprovalResolved):
            payload = approval_event_payload(event)
            return [ServerSentEvent(data=renderer.progress_chunk(payload))]
        if not isinstance(event, TurnFinished):
            return []
        if event.error is not None:
            # Headers are gone: the error travels inside the stream.
            frames = [ServerSentEvent(data=json.dumps(error_payload(event.error)))]
        else:
            frames = [ServerSentEvent(data=renderer.finish_chunk(event))]
            if renderer.include_usage:
                frames.append(ServerSentEvent(data=renderer.usage_chunk(event)))
        return [*frames, ServerSentEvent(data="[DONE]")]


async def _collect(handle: TurnHandle) -> tuple[str, tuple[ToolCall, ...], TurnFinished]:
    text: list[str] = []
    calls: tuple[ToolCall, ...] = ()
    async for event in handle.events():
        if isinstance(event, TurnText):
            text.append(event.text)
        elif isinstance(event, ClientToolCalls):
            calls = event.calls
        elif isinstance(event, TurnFinished):
            return "".join(text), calls, event
    raise AssertionError("a turn's events end with TurnFinished")


async def json_completion(
    request: Request,
    handle: TurnHandle,
    renderer: CompletionRenderer,
    headers: dict[str, str],
    *,
    grace_s: float = 0.0,
) -> Response:
    """The whole completion once the turn ends; 499 if the client hangs up first. The turn
    then stops once no retry can come: at once, or after `grace_s` for a client whose SDK
    retries by itself (`Retry.hangup_grace_s`)."""
    collect = asyncio.ensure_future(_collect(handle))
    try:
        done = await outlasted(request, collect)
    except asyncio.CancelledError:
        handle.abandon(grace_s)
        raise
    if not done:
        # The client hung up (an SDK timeout). Its SDK's retry reattaches to this turn
        # within the grace and waits for the same answer; a client that cannot retry
        # leaves nobody to answer, so the turn stops as a stream's would.
        collect.cancel()
        await asyncio.gather(collect, return_exceptions=True)
        handle.abandon(grace_s)
        return Response(status_code=499)
    text, calls, finished = collect.result()
    headers = {
        **headers,
        "X-Courier-Upstream-Calls": str(finished.upstream_calls),
        "X-Courier-Cost-USD": str(finished.cost.amount)
        if finished.cost.amount is not None
        else "unknown",
    }
    if finished.error is not None:
        return error_response(finished.error, headers)
    handle.delivered = True
    return JSONResponse(renderer.completion(text, finished, calls), headers=headers)


def error_response(error: TurnError, headers: dict[str, str]) -> JSONResponse:
    """A turn that failed before any answer: its error, at the status it names."""
    return JSONResponse(
        error_payload(error),
        status_code=turn_error_status(error),
        headers={**headers, **retry_headers(error)},
    )
