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
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from app.agent.events import ToolFinished, ToolStarted, TurnEvent, TurnFinished, TurnText
from app.agent.turns.handle import TurnHandle
from app.api.chat.render import error_response, tool_event_payload
from app.api.http.hangup import outlasted
from app.api.http.sse import ServerSentEvent
from app.api.http.statuses import turn_error_status
from app.api.responses.wire import ResponseCreateRequest, new_id
from app.providers.base import ToolCall


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


def output_items(
    shell_message_id: str, text: str, calls: tuple[ToolCall, ...], status: str
) -> list[dict[str, Any]]:
    """The message (when there is text) and then one function_call item per client call."""
    items: list[dict[str, Any]] = []
    if text:
        items.append(
            message_item(
                shell_message_id, text, "completed" if status == "completed" else "incomplete"
            )
        )
    items.extend(function_call_item(c) for c in calls)
    return items


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
    """The request's function tools as the spec's FunctionTool (all four keys present)."""
    return [
        {
            "type": "function",
            "name": t.get("name", ""),
            "description": t.get("description"),
            "parameters": t.get("parameters"),
            "strict": t.get("strict", True),
        }
        for t in request.tools or []
    ]


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


class EventRenderer:
    """Turn events as Responses stream events, numbered from 0 in emission order."""

    def __init__(self, shell: ResponseShell) -> None:
        self.shell = shell
        self.seq = 0
        self.message_id = shell.message_id
        self.text: list[str] = []
        self.opened = False

    def _event(self, kind: str, **fields: Any) -> tuple[str, str]:
        payload = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return kind, json.dumps(payload, separators=(",", ":"), ensure_ascii=False)

    def start(self) -> list[tuple[str, str]]:
        if self.shell.request.background:
            # OpenAI's order for a background response: created and queued, then running.
            queued = self.shell.body(status="queued", output=[])
            return [
                self._event("response.created", response=queued),
                self._event("response.queued", response=queued),
                self._event(
                    "response.in_progress",
                    response=self.shell.body(status="in_progress", output=[]),
                ),
            ]
        shell = self.shell.body(status="in_progress", output=[])
        return [
            self._event("response.created", response=shell),
            self._event("response.in_progress", response=shell),
        ]

    def text_delta(self, text: str) -> list[tuple[str, str]]:
        frames: list[tuple[str, str]] = []
        if not self.opened:
            self.opened = True
            frames.append(
                self._event(
                    "response.output_item.added",
                    output_index=0,
                    item=message_item(self.message_id, None, "in_progress"),
                )
            )
            frames.append(
                self._event(
                    "response.content_part.added",
                    item_id=self.message_id,
                    output_index=0,
                    content_index=0,
                    part=output_text_part(""),
                )
            )
        self.text.append(text)
        frames.append(
            self._event(
                "response.output_text.delta",
                item_id=self.message_id,
                output_index=0,
                content_index=0,
                delta=text,
                logprobs=[],
            )
        )
        return frames

    def finish(self, final: dict[str, Any]) -> list[tuple[str, str]]:
        """Close the open message, stream each client function call, then the terminal
        event carrying the final body."""
        frames: list[tuple[str, str]] = []
        output: list[dict[str, Any]] = final["output"]
        if self.opened:
            text = "".join(self.text)
            frames.append(
                self._event(
                    "response.output_text.done",
                    item_id=self.message_id,
                    output_index=0,
                    content_index=0,
                    text=text,
                    logprobs=[],
                )
            )
            frames.append(
                self._event(
                    "response.content_part.done",
                    item_id=self.message_id,
                    output_index=0,
                    content_index=0,
                    part=output_text_part(text),
                )
            )
            item = output[0] if output and output[0]["type"] == "message" else None
            item = item or message_item(self.message_id, text, "completed")
            frames.append(self._event("response.output_item.done", output_index=0, item=item))
        calls = [i for i in output if i["type"] == "function_call"]
        for index, item in enumerate(calls, start=1 if self.opened else 0):
            frames.append(
                self._event(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "arguments": "", "status": "in_progress"},
                )
            )
            frames.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=item["arguments"],
                )
            )
            frames.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
            frames.append(self._event("response.output_item.done", output_index=index, item=item))
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
        if isinstance(event, TurnText):
            return _encoded(self.renderer.text_delta(event.text))
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
