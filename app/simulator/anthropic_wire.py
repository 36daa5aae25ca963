"""The Anthropic Messages wire: request parsing, responses, SSE events, errors."""

from __future__ import annotations

import json
from typing import Any

from app.simulator.cache import PromptCache, PromptUsage, anthropic_usage
from app.simulator.config import SimulatorConfig
from app.simulator.output import Output, OutToolCall, argument_pieces, text_pieces
from app.simulator.request import (
    Breakpoint,
    ErrorKind,
    HistoryFacts,
    SimError,
    SimRequest,
    Wire,
)
from app.simulator.script import Finish
from app.simulator.token_count import (
    Segment,
    canonical_json,
    count_tokens,
    json_segment,
    text_segment,
    without_cache_control,
)
from app.simulator.wire import Frame, sse

MAX_BREAKPOINTS = 4

_STOP_REASONS: dict[Finish, str] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "stop_sequence": "stop_sequence",
    "content_filter": "refusal",
}

_ERROR_TYPES: dict[ErrorKind, str] = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "request_too_large": "request_too_large",
    "rate_limit": "rate_limit_error",
    "api_error": "api_error",
    "overloaded": "overloaded_error",
}

# ------------------------------------------------------------------------------ parsing


def _bad(message: str) -> SimError:
    return SimError(400, "invalid_request", message)


class _Prompt:
    """Segments in wire order, with the breakpoints `cache_control` markers put on them."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.breakpoints: list[Breakpoint] = []

    def add(self, segment: Segment, block: dict[str, Any]) -> None:
        self.segments.append(segment)
        control = block.get("cache_control")
        if isinstance(control, dict):
            ttl = 3600.0 if control.get("ttl") == "1h" else 300.0
            self.breakpoints.append(Breakpoint(len(self.segments) - 1, ttl))


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(f"{what}: Input should be an object")
    return value


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _result_segment(role: str, block: dict[str, Any]) -> Segment:
    content = block.get("content", "")
    blocks = content if isinstance(content, list) else []
    facts = {
        "role": role,
        "type": "tool_result",
        "tool_use_id": block.get("tool_use_id"),
        "is_error": bool(block.get("is_error", False)),
        "form": "string" if isinstance(content, str) else len(blocks),
    }
    if all(isinstance(b, dict) and b.get("type") == "text" for b in blocks):
        return text_segment(facts, _result_text(content))
    return json_segment(facts, [without_cache_control(_object(b, "content")) for b in blocks])


def _block_segment(role: str, block: dict[str, Any], facts: HistoryFacts) -> Segment:
    kind = block.get("type")
    header: dict[str, Any] = {"role": role, "type": kind}
    if kind == "text":
        return text_segment(header, str(block.get("text", "")))
    if kind == "thinking":
        header["signature"] = block.get("signature")
        return text_segment(header, str(block.get("thinking", "")))
    if kind == "tool_use":
        arguments = canonical_json(block.get("input", {}))
        facts.tool_call(str(block.get("id", "")), str(block.get("name", "")), arguments)
    elif kind == "tool_result":
        text = _result_text(block.get("content", ""))
        facts.tool_result(
            str(block.get("tool_use_id", "")), text, is_error=bool(block.get("is_error"))
        )
        return _result_segment(role, block)
    return json_segment(header, without_cache_control(block))


def _message(raw: Any, prompt: _Prompt, facts: HistoryFacts) -> None:
    message = _object(raw, "messages")
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise _bad(f"messages: Unexpected role {role!r}. Allowed roles are 'user' and 'assistant'.")
    content = message.get("content")
    if isinstance(content, str):
        prompt.segments.append(text_segment({"role": role, "type": "text"}, content))
        if role == "user":
            facts.user(content)
        else:
            facts.assistant()
        return
    if not isinstance(content, list):
        raise _bad("messages: content must be a string or an array of content blocks")
    if role == "assistant":
        facts.assistant()
    blocks = [_object(b, "content") for b in content]
    for block in blocks:
        prompt.add(_block_segment(role, block, facts), block)
    texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
    if role == "user" and texts:
        facts.user("\n".join(texts))
    if any(b.get("type") == "tool_result" for b in blocks):
        # Text riding along with tool results does not make the turn a user question.
        facts.last_role = "tool"


def _ids(message: dict[str, Any], kind: str, key: str) -> list[str]:
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    return [str(b.get(key)) for b in blocks if isinstance(b, dict) and b.get("type") == kind]


def _pair(index: int, message: dict[str, Any], pending: list[str]) -> list[str]:
    """Reject what the real API rejects: a tool_use not answered in the very next message,
    or a tool_result answering nothing. Returns the ids the next message must answer."""
    results = _ids(message, "tool_result", "tool_use_id")
    missing = [i for i in pending if i not in results]
    if missing:
        raise _bad(
            f"messages.{index - 1}: `tool_use` ids were found without `tool_result` blocks "
            f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
            "corresponding `tool_result` block in the next message."
        )
    unexpected = [i for i in results if i not in pending]
    if unexpected:
        raise _bad(
            f"messages.{index}: unexpected `tool_use_id` found in `tool_result` blocks: "
            f"{unexpected[0]}. Each `tool_result` block must have a corresponding `tool_use` "
            "block in the previous message."
        )
    return _ids(message, "tool_use", "id") if message.get("role") == "assistant" else []


def _check_tools_defined(messages: list[Any], tool_names: tuple[str, ...]) -> None:
    # The real API refuses tool blocks without tool definitions, so "one last call with
    # the tools removed" must keep the definitions (and use tool_choice none) instead.
    if tool_names:
        return
    for message in messages:
        if _ids(message, "tool_use", "id") or _ids(message, "tool_result", "tool_use_id"):
            raise _bad(
                "Requests which include `tool_use` or `tool_result` blocks must define tools."
            )


def _system(system: Any, prompt: _Prompt, facts: HistoryFacts) -> None:
    if system is None:
        return
    if isinstance(system, str):
        prompt.segments.append(text_segment({"role": "system", "type": "text"}, system))
        facts.system(system)
        return
    if not isinstance(system, list):
        raise _bad("system: Input should be a valid string or list of text blocks")
    for block in (_object(b, "system") for b in system):
        text = str(block.get("text", ""))
        prompt.add(text_segment({"role": "system", "type": "text"}, text), block)
        facts.system(text)


def _tools(tools: Any, prompt: _Prompt) -> tuple[str, ...]:
    if tools is None:
        return ()
    if not isinstance(tools, list):
        raise _bad("tools: Input should be a valid list")
    names: list[str] = []
    for tool in (_object(t, "tools") for t in tools):
        prompt.add(json_segment({"type": "tool"}, without_cache_control(tool)), tool)
        names.append(str(tool.get("name", "")))
    return tuple(names)


def _tool_parameters(tools: Any) -> dict[str, Any]:
    if not isinstance(tools, list):
        return {}
    return {
        str(t.get("name", "")): t.get("input_schema") or {} for t in tools if isinstance(t, dict)
    }


def _max_tokens(body: dict[str, Any], required: bool) -> int | None:
    value = body.get("max_tokens")
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad("max_tokens: Field required" if value is None else "max_tokens: must be >= 1")
    return value


def parse(body: Any, *, require_max_tokens: bool = True) -> SimRequest:
    """`require_max_tokens=False` for `count_tokens`, which takes no output limit."""
    body = _object(body, "body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _bad("messages: Field required")
    max_tokens = _max_tokens(body, require_max_tokens)
    prompt, facts = _Prompt(), HistoryFacts()
    names = _tools(body.get("tools"), prompt)
    _system(body.get("system"), prompt, facts)
    pending: list[str] = []
    for index, message in enumerate(messages):
        _message(message, prompt, facts)
        pending = _pair(index, message, pending)
    _check_tools_defined(messages, names)
    if len(prompt.breakpoints) > MAX_BREAKPOINTS:
        found = len(prompt.breakpoints)
        raise _bad(f"A maximum of 4 blocks with cache_control may be provided. Found {found}.")
    stop = body.get("stop_sequences") or []
    temperature = body.get("temperature")
    choice = body.get("tool_choice")
    forced = (
        choice.get("name") if isinstance(choice, dict) and choice.get("type") == "tool" else None
    )
    return SimRequest(
        wire="anthropic",
        model=model,
        stream=body.get("stream") is True,
        segments=tuple(prompt.segments),
        max_tokens=max_tokens,
        temperature=temperature if isinstance(temperature, int | float) else None,
        stop=tuple(s for s in stop if isinstance(s, str)),
        tool_names=names,
        tools_disabled=isinstance(choice, dict) and choice.get("type") == "none",
        system_text=facts.system_text,
        last_role=facts.last_role,
        last_user_text=facts.last_user_text,
        last_tool_results=tuple(facts.last_tool_results),
        breakpoints=tuple(prompt.breakpoints),
        tool_parameters=_tool_parameters(body.get("tools")),
        forced_tool=forced if isinstance(forced, str) else None,
        # `output_config.format` (GA) or the beta `output_format`.
        output_schema=_output_schema(
            body.get("output_config") or {"format": body.get("output_format")}
        ),
    )


def _output_schema(config: Any) -> dict[str, Any] | None:
    fmt = config.get("format") if isinstance(config, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    schema = fmt.get("schema")
    return schema if isinstance(schema, dict) else {}


# ------------------------------------------------------------------------------ rendering


def _usage(usage: PromptUsage, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": usage.fresh_input,
        "cache_creation_input_tokens": usage.cache_write,
        "cache_read_input_tokens": usage.cache_read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": usage.cache_write_5m,
            "ephemeral_1h_input_tokens": usage.cache_write_1h,
        },
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _final_usage(usage: PromptUsage, output: Output) -> dict[str, Any]:
    body = _usage(usage, output.output_tokens)
    if output.reasoning:
        body["output_tokens_details"] = {"thinking_tokens": output.reasoning_tokens}
    return body


def _delta_usage(usage: PromptUsage, output: Output) -> dict[str, Any]:
    # Cumulative totals, as the live API sends them; the SDK overwrites, never adds.
    body: dict[str, Any] = {
        "input_tokens": usage.fresh_input,
        "cache_creation_input_tokens": usage.cache_write,
        "cache_read_input_tokens": usage.cache_read,
        "output_tokens": output.output_tokens,
    }
    if output.reasoning:
        body["output_tokens_details"] = {"thinking_tokens": output.reasoning_tokens}
    return body


def _tool_input(call: OutToolCall) -> dict[str, Any]:
    # The real API always returns an object; unparseable (scripted or truncated) text -> {}.
    try:
        value = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _blocks(output: Output) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if output.reasoning:
        thinking = {"type": "thinking", "thinking": output.reasoning}
        blocks.append({**thinking, "signature": output.signature})
    if output.text:
        blocks.append({"type": "text", "text": output.text})
    for call in output.tool_calls:
        tool_use = {"type": "tool_use", "id": call.id, "name": call.name}
        blocks.append({**tool_use, "input": _tool_input(call)})
    return blocks


def _shell(request: SimRequest, usage: dict[str, Any], seq: int) -> dict[str, Any]:
    """A message with no content yet, as `message_start` carries it."""
    return {
        "id": f"msg_sim{seq:08d}",
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }


def _event(kind: str, tokens: int = 0, **fields: Any) -> Frame:
    return Frame(sse(json.dumps({"type": kind, **fields}), event=kind), tokens)


def _delta(index: int, tokens: int, **delta: Any) -> Frame:
    return _event("content_block_delta", tokens, index=index, delta=delta)


def _block_frames(index: int, start: dict[str, Any], deltas: list[Frame]) -> list[Frame]:
    begin = _event("content_block_start", index=index, content_block=start)
    return [begin, *deltas, _event("content_block_stop", index=index)]


def _thinking_frames(index: int, output: Output) -> list[Frame]:
    pieces = text_pieces(output.reasoning)
    deltas = [_delta(index, count_tokens(p), type="thinking_delta", thinking=p) for p in pieces]
    deltas.append(_delta(index, 0, type="signature_delta", signature=output.signature))
    return _block_frames(index, {"type": "thinking", "thinking": "", "signature": ""}, deltas)


def _text_frames(index: int, text: str) -> list[Frame]:
    pieces = text_pieces(text)
    deltas = [_delta(index, count_tokens(p), type="text_delta", text=p) for p in pieces]
    return _block_frames(index, {"type": "text", "text": ""}, deltas)


def _tool_frames(index: int, call: OutToolCall) -> list[Frame]:
    pieces = argument_pieces(call.arguments)
    deltas = [
        _delta(index, count_tokens(p), type="input_json_delta", partial_json=p) for p in pieces
    ]
    start = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
    return _block_frames(index, start, deltas)


def _content_frames(output: Output) -> list[Frame]:
    frames: list[Frame] = []
    index = 0
    if output.reasoning:
        frames += _thinking_frames(index, output)
        index += 1
    if output.text:
        frames += _text_frames(index, output.text)
        index += 1
    for call in output.tool_calls:
        frames += _tool_frames(index, call)
        index += 1
    return frames


class AnthropicWire:
    name: Wire = "anthropic"
    id_prefix = "toolu"

    def parse(self, body: Any) -> SimRequest:
        return parse(body)

    def error_body(self, error: SimError) -> dict[str, Any]:
        detail = {"type": _ERROR_TYPES[error.kind], "message": error.message}
        return {"type": "error", "error": detail}

    def error_frame(self, error: SimError) -> Frame:
        return Frame(sse(json.dumps(self.error_body(error)), event="error"))

    def overflow_error(self, tokens: int, window: int) -> SimError:
        message = f"prompt is too long: {tokens} tokens > {window} maximum"
        return SimError(400, "invalid_request", message)

    def prompt_usage(
        self, cache: PromptCache, now: float, request: SimRequest, config: SimulatorConfig
    ) -> PromptUsage:
        return anthropic_usage(
            cache,
            now,
            namespace=json.dumps(["anthropic", request.model]),
            segments=request.segments,
            breakpoints=request.breakpoints,
            min_tokens=config.min_cacheable_tokens,
        )

    def response_body(
        self, request: SimRequest, output: Output, usage: PromptUsage, seq: int
    ) -> dict[str, Any]:
        message = _shell(request, _final_usage(usage, output), seq)
        message["content"] = _blocks(output)
        message["stop_reason"] = _STOP_REASONS[output.finish]
        message["stop_sequence"] = output.stop_sequence
        return message

    def stream_frames(
        self, request: SimRequest, output: Output, usage: PromptUsage, seq: int
    ) -> list[Frame]:
        start = _shell(request, _usage(usage, 1), seq)
        delta = {"stop_reason": _STOP_REASONS[output.finish], "stop_sequence": output.stop_sequence}
        return [
            _event("message_start", message=start),
            _event("ping"),
            *_content_frames(output),
            _event("message_delta", delta=delta, usage=_delta_usage(usage, output)),
            _event("message_stop"),
        ]
