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

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

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
from app.tools.mcp.remote import (
    RemoteServer,
    RemoteTools,
    ToolFilter,
    call_of,
    model_name,
    replayed_result,
)

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
    remote: tuple[tuple[int, RemoteServer], ...] = ()
    """The request's `mcp` tools, with their index in `tools` (for the errors naming one)."""
    approved: tuple[tuple[str, str], ...] = ()
    """(call id, where its approval sits) of held calls the request approves."""

    def turn_request(
        self,
        asked: Asked,
        *,
        session_id: str | None,
        profile: Profile,
        remote: RemoteTools | None = None,
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
            remote=remote if remote is not None else RemoteTools(approved=self.approved),
        )


def translate(request: ResponseCreateRequest) -> Translated:
    """Check and translate everything the request says; raises the 400 of the first thing
    it got wrong."""
    check_supported(request)
    tools = function_tools(request)
    choice = tool_choice(request.tool_choice)
    output = output_format(request)
    effort = reasoning_effort(request)
    remote = mcp_servers(request)
    drafts, items, approved = read_input(request)
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
        remote=remote,
        approved=approved,
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
        if kind == "mcp":
            continue  # checked whole by `mcp_servers`
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
        if tool.get("type") == "mcp":
            continue
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
    if kind == "mcp":
        return _mcp_choice(choice)
    raise ApiError(
        400,
        "tool_choice must be auto, none, required, {type: function, name} or "
        "{type: mcp, server_label, name}",
        param="tool_choice",
    )


def _mcp_choice(choice: dict[str, Any]) -> str:
    """`{type: mcp, server_label, name}`: that tool, by the name the model knows it by
    (checked against the turn's tools when it opens, as a function's name is)."""
    label, name = choice.get("server_label"), choice.get("name")
    if not isinstance(label, str) or not _LABEL.match(label):
        raise ApiError(
            400, "tool_choice.server_label is required", param="tool_choice.server_label"
        )
    if not isinstance(name, str) or not name:
        # Any tool of one server cannot be asked of every upstream: name the tool.
        raise ApiError(
            400,
            "tool_choice of type mcp needs the tool's name",
            param="tool_choice.name",
            code="unsupported_parameter",
        )
    return model_name(label, name)


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
    call_param: str = INPUT

    def message(self) -> IncomingMessage:
        if self.role == "user":
            return user_message(self.text, self.images, param=INPUT)
        if self.role == "assistant":
            return assistant_message(self.text, tuple(self.calls), param=INPUT)
        if self.role == "tool":
            return tool_result(
                self.text, self.call_id, None, param=INPUT, call_param=self.call_param
            )
        return instruction(self.role, self.text, param=INPUT)


Answers = tuple[tuple[str, str], ...]


def read_input(
    request: ResponseCreateRequest,
) -> tuple[list[_Draft], list[dict[str, Any]], Answers]:
    """`input` as messages, as the spec's input items, and the held calls it approves."""
    raw = request.input
    given = [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else raw
    drafts: list[_Draft] = []
    items: list[dict[str, Any]] = []
    approved: list[tuple[str, str]] = []
    for i, item in enumerate(given):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise ApiError(400, f"{where} must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            _read_message(item, where, drafts, items)
        elif kind in ("function_call", "function_call_output"):
            _read_call(item, where, drafts, items)
        elif kind == "mcp_call":
            _read_mcp_call(item, where, drafts, items)
        elif kind == "mcp_approval_response":
            if (answer := _read_approval(item, where, drafts, items)) is not None:
                approved.append(answer)
        elif kind not in ("reasoning", "mcp_list_tools", "mcp_approval_request"):
            # reasoning, a listing and an approval request are display state: none of them
            # re-enters a log (the listing is kept with the response that made it).
            raise ApiError(
                400,
                f"input item type {kind!r} is not supported",
                param=f"{where}.type",
                code="unsupported_parameter",
            )
    answers = [item for item in items if item["type"] == "mcp_approval_response"]
    if answers:
        _check_answers(request, drafts)
    elif not any(d.role != "system" for d in drafts):
        raise ApiError(400, "input has no message", param=INPUT)
    return drafts, items, tuple(approved)


def _read_mcp_call(
    item: dict[str, Any], where: str, drafts: list[_Draft], items: list[dict[str, Any]]
) -> None:
    """A replayed `mcp_call` (a client resending its history): the call joins the
    assistant message before it and its output becomes its result, as the model first
    read them, so a stateless conversation goes on where it stood."""
    fields = {}
    for name in ("id", "server_label", "name", "arguments"):
        value = item.get(name)
        if not isinstance(value, str) or (not value and name != "arguments"):
            raise ApiError(400, f"{where}.{name} must be a string", param=f"{where}.{name}")
        fields[name] = value
    output, error = item.get("output"), item.get("error")
    if output is not None and not isinstance(output, str):
        raise ApiError(400, f"{where}.output must be a string", param=f"{where}.output")
    label, raw = fields["server_label"], fields["name"]
    call_id = fields["id"].removeprefix("mcp_")
    if not drafts or drafts[-1].role != "assistant":
        drafts.append(_Draft("assistant"))
    drafts[-1].calls.append((call_id, model_name(label, raw), fields["arguments"]))
    text = output if output is not None else f"error: {json.dumps(error)[:2000]}"
    drafts.append(_Draft("tool", replayed_result(label, raw, text), call_id=call_id))
    items.append({**fields, "type": "mcp_call", "output": output, "error": error})


def _read_approval(
    item: dict[str, Any], where: str, drafts: list[_Draft], items: list[dict[str, Any]]
) -> tuple[str, str] | None:
    """An `mcp_approval_response`: an approved call runs at the turn's start; a refused
    one is answered at once with an error result the model reads."""
    param = f"{where}.approval_request_id"
    asked = item.get("approval_request_id")
    call_id = call_of(asked) if isinstance(asked, str) else None
    if call_id is None:
        raise ApiError(
            400, f"{param} must name an mcp_approval_request item (mcpr_...)", param=param
        )
    approve = item.get("approve")
    if not isinstance(approve, bool):
        raise ApiError(400, f"{where}.approve must be true or false", param=f"{where}.approve")
    reason = item.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ApiError(400, f"{where}.reason must be a string", param=f"{where}.reason")
    items.append(
        {
            "id": item.get("id") or new_id("mcpa"),
            "type": "mcp_approval_response",
            "approval_request_id": asked,
            "approve": approve,
            "reason": reason,
        }
    )
    if approve:
        return call_id, param
    why = f" ({reason})" if reason else ""
    text = f"error: the user did not approve this call{why}"
    drafts.append(_Draft("tool", text, call_id=call_id, call_param=param))
    return None


def _check_answers(request: ResponseCreateRequest, drafts: list[_Draft]) -> None:
    """Phase one of the approval round trip: answers continue a stored response, alone.
    A new message beside them would land before the approved call's result, and every
    wire requires a call's result right after it."""
    if request.previous_response_id is None:
        raise ApiError(
            400,
            "an mcp_approval_response answers a stored response: send previous_response_id",
            param="previous_response_id",
            code="unsupported_parameter",
        )
    if any(d.role != "tool" for d in drafts):
        raise ApiError(
            400,
            "send mcp_approval_response items without new messages; send the message in "
            "the next request",
            param=INPUT,
            code="unsupported_parameter",
        )


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


# ------------------------------------------------------------------ remote mcp tools

_LABEL = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
MAX_HEADERS = 32
MAX_HEADER_BYTES = 8 * 1024


def mcp_servers(request: ResponseCreateRequest) -> tuple[tuple[int, RemoteServer], ...]:
    """The request's `mcp` tools, each checked whole; their URLs are checked against the
    egress policy by the serving, which knows the allow list."""
    found: list[tuple[int, RemoteServer]] = []
    labels: set[str] = set()
    for i, tool in enumerate(request.tools or []):
        if tool.get("type") != "mcp":
            continue
        server = _mcp_server(tool, f"tools[{i}]")
        if server.label in labels:
            raise ApiError(
                400,
                f"server_label {server.label!r} is declared twice",
                param=f"tools[{i}].server_label",
            )
        labels.add(server.label)
        found.append((i, server))
    return tuple(found)


def _mcp_server(tool: dict[str, Any], at: str) -> RemoteServer:
    for name in ("connector_id", "tunnel_id"):
        if tool.get(name) is not None:
            raise ApiError(
                400,
                f"{name} is not supported: Courier reaches MCP servers by server_url",
                param=f"{at}.{name}",
                code="unsupported_parameter",
            )
    if tool.get("defer_loading"):
        raise ApiError(
            400,
            "defer_loading is not supported: the tools are listed before the turn",
            param=f"{at}.defer_loading",
            code="unsupported_parameter",
        )
    label = tool.get("server_label")
    if not isinstance(label, str) or not _LABEL.match(label):
        raise ApiError(
            400,
            "server_label must be 1-64 letters, digits, '_' or '-'",
            param=f"{at}.server_label",
        )
    return RemoteServer(
        label=label,
        url=_server_url(tool.get("server_url"), f"{at}.server_url"),
        headers=_headers(tool, at),
        allowed=_filter(tool.get("allowed_tools"), f"{at}.allowed_tools", names_list=True),
        **_approval(tool.get("require_approval", "always"), f"{at}.require_approval"),
    )


def _server_url(url: Any, param: str) -> str:
    if not isinstance(url, str) or not url:
        raise ApiError(400, "server_url is required", param=param)
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError:
        raise ApiError(400, "server_url is not a valid URL", param=param) from None
    if parts.scheme not in ("http", "https") or not host:
        raise ApiError(400, "server_url must be an http or https URL", param=param)
    if parts.username is not None or parts.password is not None:
        raise ApiError(
            400, "server_url must not carry credentials; send them in headers", param=param
        )
    return url


def _headers(tool: dict[str, Any], at: str) -> tuple[tuple[str, str], ...]:
    given = tool.get("headers") or {}
    if not isinstance(given, dict):
        raise ApiError(400, "headers must be an object of strings", param=f"{at}.headers")
    pairs = list(given.items())
    token = tool.get("authorization")
    if token is not None:
        if not isinstance(token, str) or not token:
            raise ApiError(400, "authorization must be a string", param=f"{at}.authorization")
        pairs.append(("Authorization", f"Bearer {token}"))
    if len(pairs) > MAX_HEADERS:
        raise ApiError(400, f"at most {MAX_HEADERS} headers", param=f"{at}.headers")
    size = 0
    for name, value in pairs:
        # The names only: a header's value may be a credential, and errors are logged.
        if not isinstance(name, str) or not _HEADER_NAME.match(name):
            raise ApiError(400, "a header name is not a valid token", param=f"{at}.headers")
        if not isinstance(value, str) or any(c in value for c in "\r\n\0"):
            raise ApiError(400, f"header {name!r} must be a one-line string", param=f"{at}.headers")
        size += len(name) + len(value)
    if size > MAX_HEADER_BYTES:
        raise ApiError(400, f"headers over {MAX_HEADER_BYTES} bytes", param=f"{at}.headers")
    return tuple(pairs)


def _filter(value: Any, param: str, *, names_list: bool = False) -> ToolFilter | None:
    """`allowed_tools` (a list of names, or a filter) or one side of `require_approval`."""
    if value is None:
        return None
    if names_list and isinstance(value, list):
        if not all(isinstance(n, str) for n in value):
            raise ApiError(400, "a list of tool names is expected", param=param)
        return ToolFilter(names=frozenset(value))
    if not isinstance(value, dict) or set(value) - {"tool_names", "read_only"}:
        raise ApiError(400, "expected {tool_names, read_only}", param=param)
    names, read_only = value.get("tool_names"), value.get("read_only")
    if names is not None and not (
        isinstance(names, list) and all(isinstance(n, str) for n in names)
    ):
        raise ApiError(400, "tool_names must be a list of strings", param=f"{param}.tool_names")
    if read_only is not None and not isinstance(read_only, bool):
        raise ApiError(400, "read_only must be true or false", param=f"{param}.read_only")
    return ToolFilter(frozenset(names) if names is not None else None, read_only)


def _approval(value: Any, param: str) -> dict[str, ToolFilter | None]:
    if value == "always" or value is None:
        return {"ask_always": ToolFilter(), "ask_never": None}
    if value == "never":
        return {"ask_always": None, "ask_never": ToolFilter()}
    if not isinstance(value, dict) or set(value) - {"always", "never"}:
        raise ApiError(400, "require_approval must be always, never or a filter", param=param)
    return {
        "ask_always": _filter(value.get("always"), f"{param}.always"),
        "ask_never": _filter(value.get("never"), f"{param}.never"),
    }
