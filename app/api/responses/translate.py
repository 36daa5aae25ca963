"""A Responses request translated once, straight into what the agent is asked (`TurnRequest`).

`instructions` and leading system/developer items are the context tier of the session's
prompt, as a chat request's leading system messages are; `function_call` items join the
assistant message before them and `function_call_output` items are tool results, so the
log holds the same rows whichever door a conversation came through. The pieces that mean
the same on both doors are chat's (`app/api/chat/translate.py`).

Everything a client got wrong is a 400 naming the Responses field, raised here before
anything is stored or any session forked. A message's own errors (an image, a result for
a call nobody made, an assistant prefill) name `input`, as this API has answered since it
was served: an item of `input` may not be one message (calls merge into the assistant
message before them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from pydantic import ValidationError

from app.agent.turn_request import IncomingMessage, TurnRequest
from app.api.chat.translate import (
    assistant_message,
    cost_cap,
    image_of,
    instruction,
    json_schema_output,
    tool_result,
    tool_specs,
    user_message,
)
from app.api.chat.wire import FunctionDef, JsonSchemaFormat, ReasoningEffort
from app.api.http.errors import ApiError, validation_error
from app.api.responses.wire import (
    BUILTIN_TOOL_TYPES,
    CLIENT_TOOLS,
    STRUCTURED_OUTPUT,
    ResponseCreateRequest,
    new_id,
)
from app.api.turn_serving import Asked
from app.config import Profile
from app.db.chat_store import StoredImage
from app.providers.base import OutputFormat, SamplingParams, ToolChoice, ToolSpec

INPUT = "input"
"""Where an error about one of the request's messages points."""
_CHOICES = ("auto", "none", "required")


@dataclass(frozen=True, slots=True)
class Translated:
    """A Responses request in the agent's terms, all but where it runs: the session and
    profile are known only once `previous_response_id` is resolved and the turn opens."""

    request: ResponseCreateRequest
    instructions: tuple[str, ...]
    messages: tuple[IncomingMessage, ...]
    items: list[dict[str, Any]]
    """The input as the spec's input items, kept for `GET .../input_items`."""
    client_tools: tuple[ToolSpec, ...]
    tool_choice: ToolChoice
    output_format: OutputFormat | None
    sampling: SamplingParams

    def turn_request(
        self, asked: Asked, *, session_id: str | None, profile: Profile
    ) -> TurnRequest:
        principal, on_behalf = asked.principal, asked.on_behalf
        return TurnRequest(
            owner=principal.owner,
            admin=principal.admin,
            session_id=session_id,
            profile=profile,
            instructions=self.instructions,
            messages=self.messages,
            client_tools=self.client_tools,
            tool_choice=self.tool_choice,
            sampling=self.sampling,
            output_format=self.output_format,
            parallel_tool_calls=self.request.parallel_tool_calls,
            end_user=on_behalf.end_user,
            bound_session=principal.session_id,
            chat_name=on_behalf.chat,
            max_cost_usd=cost_cap(self.request.max_cost_usd),
            session_param="previous_response_id",
        )


def translate(request: ResponseCreateRequest) -> Translated:
    """Check and translate everything the request says; raises the 400 of the first thing
    it got wrong."""
    check_supported(request)
    tools = function_tools(request)
    choice = tool_choice(request.tool_choice)
    output = output_format(request)
    effort = reasoning_effort(request)
    drafts, items = read_input(request)
    leading = [request.instructions] if request.instructions else []
    while drafts and drafts[0].role in ("system", "developer"):
        leading.append(drafts.pop(0).text)
    return Translated(
        request=request,
        instructions=tuple(leading),
        messages=tuple(d.message() for d in drafts),
        items=items,
        client_tools=tools,
        tool_choice=choice,
        output_format=output,
        sampling=SamplingParams(
            temperature=request.temperature,
            top_p=request.top_p,
            max_tokens=request.max_output_tokens,
            reasoning_effort=effort,
            user=request.user or request.safety_identifier,
        ),
    )


def check_supported(request: ResponseCreateRequest) -> None:
    """Refuse what would otherwise be silently dropped, naming the parameter."""
    if request.background and not request.store:
        # As OpenAI: a background response is only ever reached again through its record.
        raise ApiError(
            400,
            "a background response must be stored: set store to true",
            param="store",
            code="invalid_value",
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


def function_tools(request: ResponseCreateRequest) -> tuple[ToolSpec, ...]:
    """The client's function tools: a Responses tool is chat's function definition,
    flattened (name, description, parameters and strict beside `type`)."""
    functions: list[FunctionDef] = []
    for i, tool in enumerate(request.tools or []):
        try:
            functions.append(FunctionDef.model_validate(tool))
        except ValidationError as exc:
            raise validation_error(exc, at=f"tools[{i}]") from None
    return tool_specs(functions)


def tool_choice(choice: Any) -> ToolChoice:
    """`auto`, `none`, `required` (bare or as `{"type": ...}`) or `{"type": "function",
    "name": ...}`; the hosted tools' choices name tools this server does not run."""
    if choice is None:
        return "auto"
    if isinstance(choice, str) and choice in _CHOICES:
        return choice
    kind = choice.get("type") if isinstance(choice, dict) else None
    if isinstance(kind, str) and kind in _CHOICES:
        return kind
    if kind == "function":
        name = choice.get("name")
        if isinstance(name, str) and name:
            return name
        raise ApiError(400, "tool_choice.name is required", param="tool_choice.name")
    raise ApiError(
        400,
        "tool_choice must be auto, none, required or {type: function, name}",
        param="tool_choice",
    )


def output_format(request: ResponseCreateRequest) -> OutputFormat | None:
    """`text.format` as the structured output chat's `response_format` asks for."""
    fmt = (request.text or {}).get("format")
    if not isinstance(fmt, dict) or fmt.get("type", "text") == "text":
        return None
    kind = fmt.get("type")
    if kind == "json_object":
        return OutputFormat("json_object")
    if kind != "json_schema":
        raise ApiError(
            400,
            f"text.format type {kind!r} is not one of text, json_object, json_schema",
            param="text.format.type",
        )
    try:
        spec = JsonSchemaFormat.model_validate(fmt)
    except ValidationError as exc:
        raise validation_error(exc, at="text.format") from None
    return json_schema_output(spec, param="text.format")


def reasoning_effort(request: ResponseCreateRequest) -> str | None:
    effort = (request.reasoning or {}).get("effort")
    if effort is not None and effort not in get_args(ReasoningEffort):
        allowed = ", ".join(get_args(ReasoningEffort))
        raise ApiError(400, f"reasoning.effort must be one of {allowed}", param="reasoning.effort")
    return effort


# ------------------------------------------------------------------ input items


@dataclass
class _Draft:
    """One message of the conversation while its items are read (a call joins the
    assistant message before it)."""

    role: Literal["user", "assistant", "tool", "system", "developer"]
    text: str = ""
    images: tuple[StoredImage, ...] = ()
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    call_id: str = ""

    def message(self) -> IncomingMessage:
        if self.role == "user":
            return user_message(self.text, self.images, param=INPUT)
        if self.role == "assistant":
            return assistant_message(self.text, tuple(self.calls), param=INPUT)
        if self.role == "tool":
            return tool_result(self.text, self.call_id, None, param=INPUT, call_param=INPUT)
        return instruction(self.role, self.text, param=INPUT)


def read_input(request: ResponseCreateRequest) -> tuple[list[_Draft], list[dict[str, Any]]]:
    """`input` as messages, and as the spec's input items."""
    raw = request.input
    given = [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else raw
    drafts: list[_Draft] = []
    items: list[dict[str, Any]] = []
    for i, item in enumerate(given):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise ApiError(400, f"{where} must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            _read_message(item, where, drafts, items)
        elif kind in ("function_call", "function_call_output"):
            _read_call(item, where, drafts, items)
        elif kind != "reasoning":  # reasoning is display state: it never re-enters a log
            raise ApiError(
                400,
                f"input item type {kind!r} is not supported",
                param=f"{where}.type",
                code="unsupported_parameter",
            )
    if not any(d.role != "system" for d in drafts):
        raise ApiError(400, "input has no message", param=INPUT)
    return drafts, items


def _read_message(
    item: dict[str, Any], where: str, drafts: list[_Draft], items: list[dict[str, Any]]
) -> None:
    role = item.get("role")
    if role not in ("user", "system", "developer", "assistant"):
        raise ApiError(400, f"{where}.role {role!r} is not supported", param=f"{where}.role")
    content: str | list[dict[str, Any]]
    if role == "user":
        content = _content_of(item.get("content"), f"{where}.content")
    else:
        content = _text_of(item.get("content"), f"{where}.content")
    if isinstance(content, str):
        drafts.append(_Draft(role, content))
    else:
        text = "".join(p["text"] for p in content if p["type"] == "text")
        urls = [p["url"] for p in content if p["type"] == "image"]
        drafts.append(_Draft(role, text, tuple(image_of(url, param=INPUT) for url in urls)))
    items.append(
        {
            "id": item.get("id") or new_id("msg"),
            "type": "message",
            "role": role,
            "status": "completed",
            "content": _item_content(content, role),
        }
    )


def _read_call(
    item: dict[str, Any], where: str, drafts: list[_Draft], items: list[dict[str, Any]]
) -> None:
    kind = item["type"]
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
    record: dict[str, Any] = {"id": item.get("id"), "type": kind, "call_id": call_id}
    if kind == "function_call":
        name, arguments = item.get("name"), item.get("arguments", "")
        if not isinstance(name, str) or not name:
            raise ApiError(400, f"{where}.name is required", param=f"{where}.name")
        if not isinstance(arguments, str):
            raise ApiError(
                400, f"{where}.arguments must be a JSON string", param=f"{where}.arguments"
            )
        if not drafts or drafts[-1].role != "assistant":
            drafts.append(_Draft("assistant"))
        drafts[-1].calls.append((call_id, name, arguments))
        record |= {"id": record["id"] or new_id("fc"), "name": name, "arguments": arguments}
    else:
        output = item.get("output")
        text = output if isinstance(output, str) else _text_of(output, f"{where}.output")
        drafts.append(_Draft("tool", text, call_id=call_id))
        record |= {"id": record["id"] or new_id("fco"), "output": text}
    items.append({**record, "status": "completed"})


def _text_of(content: Any, where: str) -> str:
    """A text-only content (tool output, assistant history) from a string or text parts."""
    parts = _content_of(content, where, images=False)
    return parts if isinstance(parts, str) else "".join(p["text"] for p in parts)


def _content_of(content: Any, where: str, *, images: bool = True) -> str | list[dict[str, Any]]:
    """A message's content as a string, or as text and image parts."""
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
            parts.append({"type": "image", "url": part["image_url"]})
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
        else {"type": "input_image", "image_url": p["url"], "detail": "auto"}
        for p in content
    ]
