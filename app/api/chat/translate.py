"""A chat request translated once into what the agent is asked (`TurnRequest`).

Leading system/developer messages are the context tier of the session's prompt; every
later one is an instruction kept in the log at its place. User, assistant and tool
messages become log rows; images are decoded once, stored once per session and referenced
by hash. The same pass yields the client-visible transcript that stateless continuity
matches on (`app/agent/opening/continuity.py`). Everything a client got wrong here is a 400 that
names the field, raised before anything is stored.

The pieces that mean the same on both front doors (a message as a log row, an image, the
client's tools, structured output) are the Responses translation's too
(`app/api/responses/translate.py`), each taking the place the client named as `param`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable
from decimal import Decimal
from functools import partial
from typing import Literal

from app.agent.structured import schema_problem
from app.agent.turn_request import IncomingMessage, TurnRequest, VisibleMessage
from app.api.chat.resend import Resumed
from app.api.chat.wire import ChatCompletionRequest, ChatMessageIn, FunctionDef, JsonSchemaFormat
from app.api.http.end_users import OnBehalf
from app.api.http.errors import ApiError
from app.config import Profile
from app.db.chat_store import StoredImage
from app.db.store import NewMessage
from app.providers.base import OutputFormat, SamplingParams, ToolChoice, ToolSpec

_INSTRUCTION_ROLES = ("system", "developer")
_DATA_URL = re.compile(r"^data:(image/[A-Za-z0-9.+-]+);base64,(.*)$", re.S)


def image_of(url: str, *, param: str) -> StoredImage:
    """An image part as stored: data URLs decoded once and keyed by content hash."""
    if match := _DATA_URL.match(url):
        media_type, payload = match.group(1), match.group(2).strip()
        try:
            raw = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "the image data URL is not valid base64", param=param) from None
        sha = hashlib.sha256(raw).hexdigest()
        return StoredImage(sha, media_type, base64.b64encode(raw).decode(), "")
    if url.startswith("https://"):
        return StoredImage(hashlib.sha256(url.encode()).hexdigest(), "", "", url)
    raise ApiError(
        400,
        "image_url must be an https URL or a base64 data URL (data:image/...;base64,...)",
        param=param,
        code="invalid_image_url",
    )


def tool_specs(functions: Iterable[FunctionDef]) -> tuple[ToolSpec, ...]:
    """The client's tool schemas in a stable order, so the same set keeps the cache."""
    specs = {
        f.name: ToolSpec(
            name=f.name,
            description=f.description or "",
            parameters=f.parameters or {"type": "object", "properties": {}},
        )
        for f in functions
    }
    return tuple(specs[name] for name in sorted(specs))


def cost_cap(usd: float | None) -> Decimal | None:
    """A request's spend cap, exact (a float's binary expansion is not the cap it wrote)."""
    return Decimal(str(usd)) if usd is not None else None


def turn_request(
    request: ChatCompletionRequest,
    *,
    owner: str,
    admin: bool,
    session_id: str | None,
    profile: Profile,
    on_behalf: OnBehalf,
    bound_session: str | None = None,
    resume: Resumed | None = None,
) -> TurnRequest:
    """`resume`: the request holds only the leading instructions and what follows the
    stored prefix `resume` names (`app/api/chat/resend.py`); the messages keep the places
    the client gave them (`messages[cut]` on), so errors name the client's own index."""
    messages = request.messages
    n = 0
    while n < len(messages) and messages[n].role in _INSTRUCTION_ROLES:
        n += 1
    skipped = 0
    if resume is not None:
        n = resume.lead  # the tail may open with an instruction: a log row, not context
        skipped = resume.cut - n
    return TurnRequest(
        owner=owner,
        admin=admin,
        session_id=session_id,
        profile=profile,
        instructions=tuple(m.text() for m in messages[:n]),
        messages=tuple(
            incoming(m, f"messages[{i}]") for i, m in enumerate(messages[n:], n + skipped)
        ),
        client_tools=tool_specs(t.function for t in request.tools or ()),
        tool_choice=tool_choice(request),
        sampling=sampling(request),
        output_format=output_format(request),
        parallel_tool_calls=request.parallel_tool_calls,
        end_user=on_behalf.end_user,
        bound_session=bound_session,
        chat_name=on_behalf.chat,
        max_cost_usd=cost_cap(request.max_cost_usd),
        resume=resume.point if resume is not None else None,
    )


def incoming(m: ChatMessageIn, param: str) -> IncomingMessage:
    """One message as a log row and as the continuity chain sees it, images decoded once."""
    if m.role == "user":
        images = tuple(image_of(url, param=f"{param}.content") for url in m.images())
        return user_message(m.text(), images, param=param)
    if m.role == "assistant":
        calls = tuple((c.id, c.function.name, c.function.arguments) for c in m.tool_calls or ())
        return assistant_message(m.text(), calls, param=param)
    if m.role == "tool":
        call_param = f"{param}.tool_call_id"
        return tool_result(m.text(), m.tool_call_id, m.name, param=param, call_param=call_param)
    if m.role == "system" or m.role == "developer":
        # A later system/developer message: an instruction kept in the log at its place.
        return instruction(m.role, m.text(), param=param)
    return IncomingMessage(m.role, _no_row, None, (), param)  # legacy `function`: not kept


def user_message(text: str, images: tuple[StoredImage, ...], *, param: str) -> IncomingMessage:
    keys = tuple(s.sha256 for s in images)
    seen = VisibleMessage("user", text, images=keys)
    return IncomingMessage("user", partial(_user_row, text, keys), seen, images, param)


def assistant_message(
    text: str, calls: tuple[tuple[str, str, str], ...], *, param: str
) -> IncomingMessage:
    """An assistant message with its client tool calls, as (id, name, arguments)."""
    seen = VisibleMessage("assistant", text, calls=calls)
    return IncomingMessage("assistant", partial(_assistant_row, text, calls), seen, (), param)


def tool_result(
    text: str, call_id: str | None, name: str | None, *, param: str, call_param: str
) -> IncomingMessage:
    """A client tool's result; `call_param` names where the call id it answers sits."""
    seen = VisibleMessage("tool", text, call_id=call_id or "")
    row = partial(_tool_row, text, call_id, name)
    return IncomingMessage("tool", row, seen, (), param, call_param)


def instruction(role: Literal["system", "developer"], text: str, *, param: str) -> IncomingMessage:
    return IncomingMessage(role, partial(_system_row, text), None, (), param)


def _user_row(text: str, images: tuple[str, ...]) -> NewMessage:
    return NewMessage(role="user", content=text, images=images)


def _assistant_row(text: str, calls: tuple[tuple[str, str, str], ...]) -> NewMessage | None:
    if not text and not calls:
        return None
    said = [{"id": i, "name": n, "arguments": a} for i, n, a in calls]
    return NewMessage(role="assistant", content=text or None, tool_calls=said)


def _tool_row(text: str, call_id: str | None, name: str | None) -> NewMessage:
    return NewMessage(role="tool", content=text, tool_call_id=call_id, tool_name=name)


def _system_row(text: str) -> NewMessage:
    return NewMessage(role="system", content=text)


def _no_row() -> None:
    return None


def output_format(request: ChatCompletionRequest) -> OutputFormat | None:
    fmt = request.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return OutputFormat("json_object")
    return json_schema_output(fmt.json_schema, param="response_format.json_schema")


def json_schema_output(spec: JsonSchemaFormat | None, *, param: str) -> OutputFormat:
    """A `json_schema` output format, its schema checked; `param` names where the client
    put the format's object."""
    if spec is None or spec.schema_ is None:
        raise ApiError(400, f"{param} needs a schema", param=param)
    if (problem := schema_problem(spec.schema_)) is not None:
        raise ApiError(
            400,
            f"{param}.schema is not a valid JSON schema: {problem}",
            param=f"{param}.schema",
        )
    return OutputFormat("json_schema", spec.schema_, spec.name, bool(spec.strict))


def tool_choice(request: ChatCompletionRequest) -> ToolChoice:
    choice = request.tool_choice
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        return choice
    return choice.function.name


def sampling(request: ChatCompletionRequest) -> SamplingParams:
    return SamplingParams(
        temperature=request.temperature,
        top_p=request.top_p,
        stop=request.stop_list(),
        max_tokens=request.output_limit(),
        seed=request.seed,
        frequency_penalty=request.frequency_penalty,
        presence_penalty=request.presence_penalty,
        logit_bias=tuple(sorted((request.logit_bias or {}).items())),
        reasoning_effort=request.reasoning_effort,
        service_tier=request.service_tier,
        user=request.user or request.safety_identifier,
        metadata=tuple(sorted((request.metadata or {}).items())),
    )
