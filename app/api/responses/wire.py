"""Responses API wire models: the lenient request, its translation onto a chat-completions
request, and the strict Response objects and stream events rendered from turn events.

The Responses API is a translation layer, not a second agent: the request becomes the same
`ChatCompletionRequest` the chat route builds and runs through the same serving path, so
caps, caching, tools and usage behave identically on both endpoints. Only the shapes
differ. Output bodies follow the official spec (`Response`, `ResponseStreamEvent`); every
event carries a `sequence_number` counted from 0, since the SDKs reorder nothing but the
Agents SDK checks the count.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.agent.events import TurnFinished
from app.api.http.errors import ApiError
from app.api.http.statuses import turn_error_status
from app.providers.base import ToolCall

CLIENT_TOOLS = True
"""Client-defined function tools: the chat path ends the turn at their calls."""
STRUCTURED_OUTPUT = True
"""`text.format` json_schema/json_object map onto the chat path's `response_format`."""

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


# ------------------------------------------------------------------ request translation


def _text_of(content: Any, where: str) -> str:
    """A text-only content (tool output, assistant history) from a string or text parts."""
    parts = _content_of(content, where, images=False)
    return parts if isinstance(parts, str) else "".join(p["text"] for p in parts)


def _content_of(content: Any, where: str, *, images: bool = True) -> str | list[dict[str, Any]]:
    """A message's content as chat content: a string, or text and image_url parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{where} must be a string or a list of parts", param=where)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif images and kind == "input_image" and isinstance(part.get("image_url"), str):
            url: dict[str, Any] = {"url": part["image_url"]}
            if isinstance(part.get("detail"), str):
                url["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": url})
        else:
            hint = (
                "input_image needs image_url (file_id is not supported)"
                if (kind == "input_image")
                else "send input_text or input_image parts"
            )
            raise ApiError(
                400,
                f"content part type {kind!r} is not supported here; {hint}",
                param=f"{where}[{j}].type",
                code="unsupported_content",
            )
    return parts


def _item_content(content: str | list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    """Content as the spec's input item resource shows it."""
    if role == "assistant":
        text = content if isinstance(content, str) else "".join(p["text"] for p in content)
        return [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    return [
        {"type": "input_text", "text": p["text"]}
        if p["type"] == "text"
        else {"type": "input_image", "image_url": p["image_url"]["url"], "detail": "auto"}
        for p in content
    ]


@dataclass
class Translated:
    """A Responses request as chat messages, plus the normalised input items to keep."""

    messages: list[dict[str, Any]]
    items: list[dict[str, Any]] = field(default_factory=list)


def _add_call(out: Translated, item: dict[str, Any], call_id: str, where: str) -> None:
    """A `function_call` item joins the assistant message before it, as chat expects."""
    name, arguments = item.get("name"), item.get("arguments", "")
    if not isinstance(name, str) or not name:
        raise ApiError(400, f"{where}.name is required", param=f"{where}.name")
    if not isinstance(arguments, str):
        raise ApiError(400, f"{where}.arguments must be a JSON string", param=f"{where}.arguments")
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    last = out.messages[-1] if out.messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        out.messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    out.items.append(
        {
            "id": item.get("id") or new_id("fc"),
            "type": "function_call",
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": "completed",
        }
    )


def input_messages(request: ResponseCreateRequest) -> Translated:
    """`instructions` + `input` as chat-completions messages."""
    out = Translated(messages=[])
    if request.instructions:
        out.messages.append({"role": "system", "content": request.instructions})
    raw = request.input
    items = [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else raw
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise ApiError(400, f"{where} must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise ApiError(
                    400, f"{where}.role {role!r} is not supported", param=f"{where}.role"
                )
            where_content = f"{where}.content"
            content: str | list[dict[str, Any]]
            if role == "user":
                content = _content_of(item.get("content"), where_content)
            else:
                content = _text_of(item.get("content"), where_content)
            out.messages.append({"role": role, "content": content})
            out.items.append(
                {
                    "id": item.get("id") or new_id("msg"),
                    "type": "message",
                    "role": role,
                    "status": "completed",
                    "content": _item_content(content, role),
                }
            )
        elif kind in ("function_call", "function_call_output"):
            if not CLIENT_TOOLS:
                raise ApiError(
                    400,
                    f"{kind} items need client-defined tools, which this server does not run yet",
                    param=f"{where}.type",
                    code="unsupported_parameter",
                )
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise ApiError(400, f"{where}.call_id is required", param=f"{where}.call_id")
            if kind == "function_call":
                _add_call(out, item, call_id, where)
            else:
                output = item.get("output")
                text = output if isinstance(output, str) else _text_of(output, f"{where}.output")
                out.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
                out.items.append(
                    {
                        "id": item.get("id") or new_id("fco"),
                        "type": "function_call_output",
                        "call_id": call_id,
                        "output": text,
                        "status": "completed",
                    }
                )
        elif kind == "reasoning":
            continue  # reasoning is display state here; it never re-enters a transcript
        else:
            raise ApiError(
                400,
                f"input item type {kind!r} is not supported",
                param=f"{where}.type",
                code="unsupported_parameter",
            )
    if not any(m["role"] != "system" for m in out.messages):
        raise ApiError(400, "input has no message", param="input")
    return out


def check_supported(request: ResponseCreateRequest) -> None:
    """Refuse what would otherwise be silently dropped, naming the parameter."""
    if request.background:
        raise ApiError(
            400,
            "background responses are not supported; stream instead",
            param="background",
            code="unsupported_parameter",
        )
    for i, tool in enumerate(request.tools or []):
        kind = tool.get("type")
        if kind == "function":
            if not CLIENT_TOOLS:
                raise ApiError(
                    400,
                    "client-defined function tools are not supported yet; "
                    "Courier runs its own tools server-side",
                    param=f"tools[{i}]",
                    code="unsupported_parameter",
                )
            continue
        label = "built-in tool" if kind in BUILTIN_TOOL_TYPES else "tool type"
        raise ApiError(
            400,
            f"{label} {kind!r} is not supported; Courier runs its own tools server-side",
            param=f"tools[{i}].type",
            code="unsupported_parameter",
        )
    fmt = (request.text or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type", "text") != "text" and not STRUCTURED_OUTPUT:
        raise ApiError(
            400,
            f"text.format type {fmt.get('type')!r} is not supported yet",
            param="text.format",
            code="unsupported_parameter",
        )


def chat_tools(request: ResponseCreateRequest) -> list[dict[str, Any]]:
    """Responses function tools (flat) as chat tools (nested under `function`)."""
    tools: list[dict[str, Any]] = []
    for tool in request.tools or []:
        function = {
            k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool
        }
        tools.append({"type": "function", "function": function})
    return tools


def chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    if isinstance(choice, dict) and choice.get("type") in ("auto", "none", "required"):
        return choice["type"]
    return choice


def chat_response_format(request: ResponseCreateRequest) -> dict[str, Any] | None:
    """`text.format` as chat's `response_format`: the same three kinds, schema un-nested."""
    fmt = (request.text or {}).get("format")
    if not isinstance(fmt, dict) or fmt.get("type", "text") == "text":
        return None
    if fmt.get("type") == "json_schema":
        spec = {k: fmt[k] for k in ("name", "description", "schema", "strict") if k in fmt}
        return {"type": "json_schema", "json_schema": spec}
    return {"type": fmt.get("type")}


def chat_body(request: ResponseCreateRequest, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The equivalent `ChatCompletionRequest` body."""
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.tools:
        body["tools"] = chat_tools(request)
    if request.tool_choice is not None:
        body["tool_choice"] = chat_tool_choice(request.tool_choice)
    if request.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = request.parallel_tool_calls
    if (fmt := chat_response_format(request)) is not None:
        body["response_format"] = fmt
    effort = (request.reasoning or {}).get("effort")
    if effort is not None:
        body["reasoning_effort"] = effort
    for name, value in (
        ("temperature", request.temperature),
        ("top_p", request.top_p),
        ("max_completion_tokens", request.max_output_tokens),
        ("max_cost_usd", request.max_cost_usd),
        ("user", request.user),
        ("safety_identifier", request.safety_identifier),
    ):
        if value is not None:
            body[name] = value
    return body


# ------------------------------------------------------------------ output rendering


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


ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed", "cancelled"]


def status_of(finished: TurnFinished) -> ResponseStatus:
    if finished.error is not None:
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


def response_error(finished: TurnFinished) -> dict[str, Any] | None:
    err = finished.error
    if err is None:
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
            "background": False,
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
