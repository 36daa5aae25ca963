"""What a Responses client receives: the Response object, and the stream of events that
builds it, rendered from a turn's events.

Bodies follow the official spec (`Response`, `ResponseStreamEvent`); every event carries
a `sequence_number` counted from 0, since the SDKs reorder nothing but the Agents SDK
checks the count. Courier's own `courier.tool` events go only to a client that asked.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from app.agent.events import (
    ClientToolCalls,
    RemoteMcpApproval,
    RemoteMcpCall,
    RemoteMcpResult,
    ToolFinished,
    ToolStarted,
    TurnEvent,
    TurnFinished,
    TurnText,
)
from app.agent.turns.handle import TurnHandle
from app.api.chat.render import error_response, tool_event_payload
from app.api.http.hangup import outlasted
from app.api.http.sse import ServerSentEvent
from app.api.http.statuses import turn_error_status
from app.api.responses.wire import ResponseCreateRequest, new_id
from app.providers.base import ToolCall
from app.tools.mcp.remote import approval_id


def output_text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [output_text_part(text)]
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def call_item_id(call: ToolCall) -> str:
    """A function_call item's id, derived from its call id so stream and body agree."""
    return "fc_" + call.id


def function_call_item(call: ToolCall, status: str = "completed") -> dict[str, Any]:
    return {
        "id": call_item_id(call),
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments if status == "completed" else "",
        "status": status,
    }


ResponseStatus = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]


def status_of(finished: TurnFinished) -> ResponseStatus:
    # `interrupted` (a drain ran out, a process died) carries no error of its own: read as
    # `completed`, half an answer would pass for a whole one.
    if finished.error is not None or finished.exit_reason == "interrupted":
        return "failed"
    if finished.exit_reason == "cancelled":
        return "cancelled"
    if finished.finish_reason in ("length", "content_filter"):
        return "incomplete"
    return "completed"


def response_usage(finished: TurnFinished, courier: dict[str, Any]) -> dict[str, Any]:
    """Spec usage (inclusive input, cache reads as `cached_tokens`) plus Courier's buckets."""
    u = finished.usage
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": u.cache_read_tokens,
            "cache_write_tokens": u.cache_write_tokens,
        },
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.total_tokens,
        "cost": finished.cost.amount_float,
        "courier": courier,
    }


INTERRUPTED_MESSAGE = "the server stopped before the response finished (interrupted)"


def response_error(finished: TurnFinished) -> dict[str, Any] | None:
    err = finished.error
    if err is None:
        if finished.exit_reason == "interrupted":
            return {"code": "server_error", "message": INTERRUPTED_MESSAGE}
        return None
    # The spec's code is a closed enum; Courier's own code travels in the message.
    code = "rate_limit_exceeded" if turn_error_status(err) == 429 else "server_error"
    return {"code": code, "message": f"{err.message} ({err.code})"}


def echo_tools(request: ResponseCreateRequest) -> list[dict[str, Any]]:
    """The request's tools: function tools as the spec's FunctionTool (all four keys
    present), mcp tools as its MCPTool without headers or authorization (a credential is
    sent to its server and nowhere else, the stored body included)."""
    return [
        _echo_mcp(t)
        if t.get("type") == "mcp"
        else {
            "type": "function",
            "name": t.get("name", ""),
            "description": t.get("description"),
            "parameters": t.get("parameters"),
            "strict": t.get("strict", True),
        }
        for t in request.tools or []
    ]


def _echo_mcp(tool: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "mcp",
        "server_label": tool.get("server_label"),
        "server_url": tool.get("server_url"),
        "allowed_tools": tool.get("allowed_tools"),
        "require_approval": tool.get("require_approval", "always"),
        "headers": None,
    }


def echo_format(request: ResponseCreateRequest) -> dict[str, Any]:
    fmt = (request.text or {}).get("format")
    if not isinstance(fmt, dict) or fmt.get("type", "text") == "text":
        return {"type": "text"}
    return fmt


@dataclass
class ResponseShell:
    """Everything about a response fixed at creation, so every event repeats it exactly."""

    id: str
    model: str
    request: ResponseCreateRequest
    session_id: str
    created_at: int = field(default_factory=lambda: int(time.time()))
    message_id: str = field(default_factory=lambda: new_id("msg"))
    """The output message's id, the same in the stream and in the stored body."""
    listings: tuple[dict[str, Any], ...] = ()
    """The `mcp_list_tools` items this response made before its turn (remote mcp tools)."""

    def headers(self) -> dict[str, str]:
        """The answer's headers: the session (when stored), and the fields it ignored,
        named rather than silently dropped (the courtesy the chat route gives)."""
        headers = {"X-Session-Id": self.session_id} if self.request.store else {}
        if ignored := self.request.ignored_fields():
            headers["X-Courier-Ignored"] = ", ".join(ignored)
        return headers

    def body(
        self,
        *,
        status: ResponseStatus,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        finished: TurnFinished | None = None,
    ) -> dict[str, Any]:
        r = self.request
        incomplete = None
        if finished is not None and status == "incomplete":
            reason = "content_filter" if finished.finish_reason == "content_filter" else None
            incomplete = {"reason": reason or "max_output_tokens"}
        body: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": bool(r.background),
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": r.instructions,
            "max_output_tokens": r.max_output_tokens,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": r.parallel_tool_calls
            if r.parallel_tool_calls is not None
            else True,
            "previous_response_id": r.previous_response_id,
            "reasoning": {"effort": (r.reasoning or {}).get("effort"), "summary": None},
            "store": r.store,
            "temperature": r.temperature if r.temperature is not None else 1.0,
            "text": {"format": echo_format(r)},
            "tool_choice": r.tool_choice if r.tool_choice is not None else "auto",
            "tools": echo_tools(r),
            "top_p": r.top_p if r.top_p is not None else 1.0,
            "truncation": "disabled",
            "metadata": r.metadata or {},
        }
        if r.user is not None:  # optional but not nullable in the spec
            body["user"] = r.user
        if r.safety_identifier is not None:
            body["safety_identifier"] = r.safety_identifier
        if usage is not None:
            body["usage"] = usage
        # Courier extension: the session this response lives in (the SDKs ignore it).
        body["session_id"] = self.session_id
        return body


Frame = tuple[str, dict[str, Any]]
"""A stream event's type and fields, before it is numbered."""


class OutputItems:
    """A response's output items, folded from its turn's events in order. The same fold
    makes the stream's item events and the stored body's `output`, so the two cannot
    disagree: the listings first, then messages, `mcp_call` items, approval requests and
    client function calls as they happened. Text after another item opens a new message."""

    def __init__(self, message_id: str, listings: Sequence[dict[str, Any]] = ()) -> None:
        self.message_id = message_id
        self.listings = listings
        self.items: list[dict[str, Any]] = []
        self._text: list[str] | None = None
        """The open message's text; None when no message is open."""
        self._calls: dict[str, int] = {}
        self._messages = 0

    def head(self) -> list[Frame]:
        """The remote servers' listings, made before the turn began."""
        frames: list[Frame] = []
        for listing in self.listings:
            index, item = self._append(dict(listing))
            where = {"item_id": item["id"], "output_index": index}
            ended = "failed" if item.get("error") else "completed"
            frames += [
                (
                    "response.output_item.added",
                    {"output_index": index, "item": {**item, "tools": []}},
                ),
                ("response.mcp_list_tools.in_progress", where),
                (f"response.mcp_list_tools.{ended}", where),
                ("response.output_item.done", {"output_index": index, "item": item}),
            ]
        return frames

    def add(self, event: TurnEvent) -> list[Frame]:
        match event:
            case TurnText():
                return self._text_delta(event.text)
            case RemoteMcpCall():
                return self._mcp_call(event)
            case RemoteMcpResult():
                return self._mcp_result(event)
            case RemoteMcpApproval():
                item = {
                    "id": approval_id(event.call_id),
                    "type": "mcp_approval_request",
                    "server_label": event.server_label,
                    "name": event.name,
                    "arguments": event.arguments,
                }
                frames = self._close_text("completed")
                index, item = self._append(item)
                return [
                    *frames,
                    ("response.output_item.added", {"output_index": index, "item": item}),
                    ("response.output_item.done", {"output_index": index, "item": item}),
                ]
            case ClientToolCalls():
                frames = self._close_text("completed")
                for call in event.calls:
                    frames += self._function_call(call)
                return frames
            case _:
                return []

    def close(self, status: ResponseStatus) -> list[Frame]:
        """The open message closed with the response's status; a call cut off unfinished
        is `incomplete`."""
        for index in self._calls.values():
            if self.items[index]["status"] == "in_progress":
                self.items[index]["status"] = "incomplete"
        return self._close_text("completed" if status == "completed" else "incomplete")

    def so_far(self) -> list[dict[str, Any]]:
        """The items as they stand mid-turn (a polled background response): the open
        message with its text so far."""
        items = [dict(item) for item in self.items]
        if self._text is not None:
            last = items[-1]
            items[-1] = message_item(last["id"], "".join(self._text), "in_progress")
        return items

    def _append(self, item: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.items.append(item)
        return len(self.items) - 1, item

    def _text_delta(self, text: str) -> list[Frame]:
        frames: list[Frame] = []
        if self._text is None:
            self._text = []
            item_id = (
                self.message_id if not self._messages else f"{self.message_id}_{self._messages}"
            )
            self._messages += 1
            index, _ = self._append(message_item(item_id, None, "in_progress"))
            frames += [
                ("response.output_item.added", {"output_index": index, "item": self.items[index]}),
                (
                    "response.content_part.added",
                    {**self._where(), "content_index": 0, "part": output_text_part("")},
                ),
            ]
        self._text.append(text)
        delta = {**self._where(), "content_index": 0, "delta": text, "logprobs": []}
        frames.append(("response.output_text.delta", delta))
        return frames

    def _where(self) -> dict[str, Any]:
        index = len(self.items) - 1
        return {"item_id": self.items[index]["id"], "output_index": index}

    def _close_text(self, status: str) -> list[Frame]:
        if self._text is None:
            return []
        text = "".join(self._text)
        self._text = None
        where = self._where()
        index = where["output_index"]
        item = message_item(where["item_id"], text, status)
        self.items[index] = item
        return [
            (
                "response.output_text.done",
                {**where, "content_index": 0, "text": text, "logprobs": []},
            ),
            (
                "response.content_part.done",
                {**where, "content_index": 0, "part": output_text_part(text)},
            ),
            ("response.output_item.done", {"output_index": index, "item": item}),
        ]

    def _mcp_call(self, event: RemoteMcpCall) -> list[Frame]:
        frames = self._close_text("completed")
        item: dict[str, Any] = {
            "id": "mcp_" + event.call_id,
            "type": "mcp_call",
            "server_label": event.server_label,
            "name": event.name,
            "arguments": "",
            "output": None,
            "error": None,
            "status": "in_progress",
            "approval_request_id": event.approval_request_id,
        }
        index, _ = self._append(item)
        self._calls[event.call_id] = index
        where = {"item_id": item["id"], "output_index": index}
        frames += [
            ("response.output_item.added", {"output_index": index, "item": dict(item)}),
            ("response.mcp_call_arguments.delta", {**where, "delta": event.arguments}),
            ("response.mcp_call_arguments.done", {**where, "arguments": event.arguments}),
            ("response.mcp_call.in_progress", where),
        ]
        item["arguments"] = event.arguments
        return frames

    def _mcp_result(self, event: RemoteMcpResult) -> list[Frame]:
        index = self._calls.get(event.call_id)
        if index is None:
            return []
        item = self.items[index]
        failed = event.error is not None
        item |= {
            "output": event.output,
            "error": json.loads(event.error) if event.error is not None else None,
            "status": "failed" if failed else "completed",
        }
        where = {"item_id": item["id"], "output_index": index}
        return [
            (f"response.mcp_call.{'failed' if failed else 'completed'}", where),
            ("response.output_item.done", {"output_index": index, "item": dict(item)}),
        ]

    def _function_call(self, call: ToolCall) -> list[Frame]:
        item = function_call_item(call)
        index, _ = self._append(item)
        where = {"item_id": item["id"], "output_index": index}
        return [
            (
                "response.output_item.added",
                {"output_index": index, "item": {**item, "arguments": "", "status": "in_progress"}},
            ),
            ("response.function_call_arguments.delta", {**where, "delta": call.arguments}),
            (
                "response.function_call_arguments.done",
                {**where, "name": call.name, "arguments": call.arguments},
            ),
            ("response.output_item.done", {"output_index": index, "item": item}),
        ]


def output_of(
    shell: ResponseShell, events: Iterable[TurnEvent], status: ResponseStatus
) -> list[dict[str, Any]]:
    """The stored body's `output`: the stream's fold, run over the turn's whole history."""
    items = OutputItems(shell.message_id, shell.listings)
    items.head()
    for event in events:
        items.add(event)
    items.close(status)
    return items.items


class EventRenderer:
    """Turn events as Responses stream events, numbered from 0 in emission order."""

    def __init__(self, shell: ResponseShell) -> None:
        self.shell = shell
        self.seq = 0
        self.output = OutputItems(shell.message_id, shell.listings)

    def _event(self, kind: str, **fields: Any) -> tuple[str, str]:
        payload = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return kind, json.dumps(payload, separators=(",", ":"), ensure_ascii=False)

    def _events(self, frames: list[Frame]) -> list[tuple[str, str]]:
        return [self._event(kind, **fields) for kind, fields in frames]

    def start(self) -> list[tuple[str, str]]:
        if self.shell.request.background:
            # OpenAI's order for a background response: created and queued, then running.
            queued = self.shell.body(status="queued", output=[])
            frames = [
                self._event("response.created", response=queued),
                self._event("response.queued", response=queued),
                self._event(
                    "response.in_progress",
                    response=self.shell.body(status="in_progress", output=[]),
                ),
            ]
        else:
            shell = self.shell.body(status="in_progress", output=[])
            frames = [
                self._event("response.created", response=shell),
                self._event("response.in_progress", response=shell),
            ]
        return [*frames, *self._events(self.output.head())]

    def add(self, event: TurnEvent) -> list[tuple[str, str]]:
        return self._events(self.output.add(event))

    def finish(self, final: dict[str, Any]) -> list[tuple[str, str]]:
        """Close the open message, then the terminal event carrying the final body."""
        frames = self._events(self.output.close(final["status"]))
        terminal = {
            "completed": "response.completed",
            "incomplete": "response.incomplete",
        }.get(final["status"], "response.failed")
        frames.append(self._event(terminal, response=final))
        return frames


Recording = asyncio.Future[tuple[dict[str, Any], TurnFinished]]
"""The recording of a response: its final body and how the turn ended, once stored."""


def _encoded(frames: list[tuple[str, str]]) -> bytes:
    return b"".join(ServerSentEvent(event=name, data=data).encode() for name, data in frames)


class ResponseFrames:
    """A turn's events as Responses stream events (`app/api/http/sse.py`'s `TurnFrames`):
    `response.created` at once, then the text as it comes, then the recorded response."""

    head_waits = False  # `response.created` names the response: the client may act on it

    def __init__(
        self, shell: ResponseShell, handle: TurnHandle, done: Recording, *, tool_events: bool
    ) -> None:
        self.renderer = EventRenderer(shell)
        self.handle = handle
        self.done = done
        self.tool_events = tool_events
        self.head = _encoded(self.renderer.start())

    def frames(self, event: TurnEvent) -> bytes:
        if items := self.renderer.add(event):
            return _encoded(items)
        if self.tool_events and isinstance(event, ToolStarted | ToolFinished):
            payload = json.dumps(tool_event_payload(event), separators=(",", ":"))
            return ServerSentEvent(event="courier.tool", data=payload).encode()
        return b""

    async def last(self, event: TurnFinished) -> bytes:
        # The final body is the recorder's: the stream ends with what was stored.
        final, _ = await asyncio.shield(self.done)
        self.handle.delivered = True
        return _encoded(self.renderer.finish(final))

    def left(self) -> None:
        self.handle.abandon()


async def json_answer(
    request: Request,
    handle: TurnHandle,
    done: Recording,
    headers: dict[str, str],
    *,
    grace_s: float = 0.0,
) -> Response:
    """The whole Response once it is recorded; 499 if the client hangs up first (an SDK
    timeout). The turn stops once no retry can come (`grace_s`, as chat's `json_completion`);
    a cancelled response is still stored."""
    try:
        recorded = await outlasted(request, done)
    except asyncio.CancelledError:
        handle.abandon(grace_s)
        raise
    if not recorded:
        handle.abandon(grace_s)
        return Response(status_code=499)
    final, finished = done.result()
    if finished.error is not None and not final["output"]:
        return error_response(finished.error, headers)
    handle.delivered = True
    return JSONResponse(final, headers=headers)
