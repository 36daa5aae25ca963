"""The OpenAI chat-completions wire: request parsing, responses, SSE chunks, errors."""

from __future__ import annotations

import json
import time
from typing import Any

from app.simulator.cache import PromptCache, PromptUsage, openai_usage
from app.simulator.config import SimulatorConfig
from app.simulator.output import Output, OutToolCall, argument_pieces, text_pieces
from app.simulator.request import ErrorKind, HistoryFacts, SimError, SimRequest, Wire
from app.simulator.script import Finish
from app.simulator.token_count import (
    Segment,
    count_tokens,
    json_segment,
    text_segment,
    without_cache_control,
)
from app.simulator.wire import Frame, sse

_FINISH: dict[Finish, str] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "length": "length",
    "stop_sequence": "stop",
    "content_filter": "content_filter",
}

_ERROR_TYPES: dict[ErrorKind, tuple[str, str | None]] = {
    "invalid_request": ("invalid_request_error", None),
    "authentication": ("invalid_request_error", "invalid_api_key"),
    "permission": ("invalid_request_error", "unsupported_country_region_territory"),
    "not_found": ("invalid_request_error", "model_not_found"),
    "request_too_large": ("invalid_request_error", "request_too_large"),
    "rate_limit": ("requests", "rate_limit_exceeded"),
    "api_error": ("server_error", None),
    "overloaded": ("server_error", "overloaded"),
}

# ------------------------------------------------------------------------------ parsing


def _bad(message: str, param: str | None = None) -> SimError:
    return SimError(400, "invalid_request", message, param=param)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        ]
        return "\n".join(t for t in texts if isinstance(t, str))
    return ""


def _content_segments(facts: dict[str, Any], content: Any) -> list[Segment]:
    if content is None:
        return []
    if isinstance(content, str):
        return [text_segment(facts, content)]
    if not isinstance(content, list):
        raise _bad("message content must be a string, an array of parts or null", "messages")
    segments: list[Segment] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            segments.append(text_segment({**facts, "type": "text"}, str(part.get("text", ""))))
        elif isinstance(part, dict):
            kind = part.get("type")
            segments.append(json_segment({**facts, "type": kind}, without_cache_control(part)))
        else:
            raise _bad("content parts must be objects", "messages")
    return segments


def _assistant(message: dict[str, Any], facts: HistoryFacts) -> list[Segment]:
    segments = _content_segments({"role": "assistant"}, message.get("content"))
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            raise _bad("tool_calls entries must be objects", "messages")
        function = call.get("function") or {}
        arguments = function.get("arguments", "")
        name = str(function.get("name", ""))
        facts.tool_call(
            str(call.get("id", "")), name, arguments if isinstance(arguments, str) else ""
        )
        segments.append(json_segment({"role": "assistant", "type": "tool_call"}, call))
    facts.assistant()
    return segments


def _tool(message: dict[str, Any], facts: HistoryFacts) -> list[Segment]:
    call_id = str(message.get("tool_call_id", message.get("name", "")))
    text = _content_text(message.get("content"))
    facts.tool_result(call_id, text)
    return [text_segment({"role": message["role"], "tool_call_id": call_id}, text)]


def _message(message: Any, facts: HistoryFacts) -> list[Segment]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise _bad("each message must be an object with a role", "messages")
    role = message["role"]
    header: dict[str, Any] = {"role": role}
    if isinstance(message.get("name"), str) and role != "function":
        header["name"] = message["name"]
    if role in ("system", "developer"):
        facts.system(_content_text(message.get("content")))
    elif role == "user":
        facts.user(_content_text(message.get("content")))
    elif role == "assistant":
        return _assistant(message, facts)
    elif role in ("tool", "function"):
        return _tool(message, facts)
    else:
        raise _bad(f"Invalid value: '{role}'. Supported roles are system, user, ...", "messages")
    return _content_segments(header, message.get("content"))


def _unanswered(pending: list[str], index: int) -> SimError:
    return _bad(
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(pending),
        f"messages.[{index}].role",
    )


def _pair(index: int, message: dict[str, Any], pending: list[str]) -> list[str]:
    """Reject what the real API rejects: tool calls left unanswered, or a tool message that
    answers no pending call. Returns the call ids still waiting for a tool message."""
    if message["role"] == "tool":
        call_id = str(message.get("tool_call_id"))
        if call_id not in pending:
            raise _bad(
                "Invalid parameter: messages with role 'tool' must be a response to a "
                "preceeding message with 'tool_calls'.",
                f"messages.[{index}].role",
            )
        return [i for i in pending if i != call_id]
    if pending:
        raise _unanswered(pending, index)
    if message["role"] != "assistant":
        return []
    return [str(c.get("id")) for c in message.get("tool_calls") or [] if isinstance(c, dict)]


def _tools(body: dict[str, Any]) -> tuple[list[Segment], tuple[str, ...]]:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise _bad("tools must be an array", "tools")
    if not all(isinstance(t, dict) for t in tools):
        raise _bad("tools entries must be objects", "tools")
    segments = [json_segment({"type": "tool"}, without_cache_control(t)) for t in tools]
    names = tuple(
        str((t.get("function") or {}).get("name", "")) for t in tools if isinstance(t, dict)
    )
    return segments, names


def _tool_parameters(body: dict[str, Any]) -> dict[str, Any]:
    tools = body.get("tools") or []
    functions = [t.get("function") for t in tools if isinstance(t, dict)]
    return {
        str(f.get("name", "")): f.get("parameters") or {} for f in functions if isinstance(f, dict)
    }


def _forced_tool(body: dict[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        return name if isinstance(name, str) else None
    return None


def _number(body: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        value = body.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _bad(f"{key} must be a number", key)
            return value
    return None


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if isinstance(stop, str):
        return (stop,)
    if isinstance(stop, list):
        return tuple(s for s in stop if isinstance(s, str))
    return ()


def parse(body: Any) -> SimRequest:
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty array", "messages")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("you must provide a model parameter", "model")
    segments, names = _tools(body)
    facts = HistoryFacts()
    pending: list[str] = []
    for index, message in enumerate(messages):
        segments += _message(message, facts)
        pending = _pair(index, message, pending)
    if pending:
        raise _unanswered(pending, len(messages))
    max_tokens = _number(body, "max_completion_tokens", "max_tokens")
    options = body.get("stream_options") or {}
    retention = body.get("prompt_cache_retention")
    cache_key = body.get("prompt_cache_key")
    return SimRequest(
        wire="openai",
        model=model,
        stream=body.get("stream") is True,
        segments=tuple(segments),
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        max_tokens=int(max_tokens) if max_tokens is not None else None,
        temperature=_number(body, "temperature"),
        stop=_stop(body),
        tool_names=names,
        tools_disabled=body.get("tool_choice") == "none",
        system_text=facts.system_text,
        last_role=facts.last_role,
        last_user_text=facts.last_user_text,
        last_tool_results=tuple(facts.last_tool_results),
        prompt_cache_key=cache_key if isinstance(cache_key, str) else None,
        cache_ttl_seconds=86_400.0 if retention == "24h" else 300.0,
        tool_parameters=_tool_parameters(body),
        forced_tool=_forced_tool(body),
        output_schema=_output_schema(body.get("response_format")),
    )


def _output_schema(fmt: Any) -> dict[str, Any] | None:
    if not isinstance(fmt, dict) or fmt.get("type") not in ("json_object", "json_schema"):
        return None
    spec = fmt.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return schema if isinstance(schema, dict) else {}


# ------------------------------------------------------------------------------ rendering


def _usage(usage: PromptUsage, output: Output) -> dict[str, Any]:
    completion = output.output_tokens
    return {
        "prompt_tokens": usage.total,
        "completion_tokens": completion,
        "total_tokens": usage.total + completion,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": output.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _tool_call(call: OutToolCall) -> dict[str, Any]:
    function = {"name": call.name, "arguments": call.arguments}
    return {"id": call.id, "type": "function", "function": function}


def _envelope(request: SimRequest, seq: int, obj: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-sim{seq:08d}",
        "object": obj,
        "created": int(time.time()),
        "model": request.model,
        "service_tier": "default",
        "system_fingerprint": "fp_simulator",
    }


def _message_body(output: Output) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": output.text or None,
        "refusal": None,
        "annotations": [],
    }
    if output.reasoning:
        # The field vLLM and DeepSeek use; official OpenAI models never return the text.
        message["reasoning_content"] = output.reasoning
    if output.tool_calls:
        message["tool_calls"] = [_tool_call(call) for call in output.tool_calls]
    return message


class _Chunks:
    """Builds `chat.completion.chunk` frames sharing one envelope."""

    def __init__(self, request: SimRequest, seq: int) -> None:
        self.envelope = _envelope(request, seq, "chat.completion.chunk")
        self.include_usage = request.include_usage

    def frame(self, choices: list[Any], tokens: int = 0, usage: Any = None) -> Frame:
        chunk = {**self.envelope, "choices": choices}
        if self.include_usage:
            # Every chunk says `usage: null` except the last, as the real API does.
            chunk["usage"] = usage
        return Frame(sse(json.dumps(chunk)), tokens)

    def delta(self, delta: dict[str, Any], tokens: int = 0, finish: str | None = None) -> Frame:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return self.frame([choice], tokens)


def _tool_call_frames(chunks: _Chunks, index: int, call: OutToolCall) -> list[Frame]:
    # id, type and name only on the first fragment: the SDK concatenates repeated strings.
    head = {"index": index, "id": call.id, "type": "function"}
    head["function"] = {"name": call.name, "arguments": ""}
    frames = [chunks.delta({"tool_calls": [head]})]
    for piece in argument_pieces(call.arguments):
        fragment = {"index": index, "function": {"arguments": piece}}
        frames.append(chunks.delta({"tool_calls": [fragment]}, count_tokens(piece)))
    return frames


class OpenAIWire:
    name: Wire = "openai"
    id_prefix = "call"

    def parse(self, body: Any) -> SimRequest:
        return parse(body)

    def error_body(self, error: SimError) -> dict[str, Any]:
        kind, code = _ERROR_TYPES[error.kind]
        detail = {"message": error.message, "type": kind, "param": error.param}
        return {"error": {**detail, "code": error.code or code}}

    def error_frame(self, error: SimError) -> Frame:
        return Frame(sse(json.dumps(self.error_body(error))))

    def overflow_error(self, tokens: int, window: int) -> SimError:
        message = (
            f"This model's maximum context length is {window} tokens. However, your messages "
            f"resulted in {tokens} tokens. Please reduce the length of the messages "
            "(prompt is too long)."
        )
        return SimError(
            400, "invalid_request", message, code="context_length_exceeded", param="messages"
        )

    def prompt_usage(
        self, cache: PromptCache, now: float, request: SimRequest, config: SimulatorConfig
    ) -> PromptUsage:
        namespace = json.dumps(["openai", request.model, request.prompt_cache_key])
        return openai_usage(
            cache,
            now,
            namespace=namespace,
            segments=request.segments,
            min_tokens=config.min_cacheable_tokens,
            ttl=request.cache_ttl_seconds,
        )

    def response_body(
        self, request: SimRequest, output: Output, usage: PromptUsage, seq: int
    ) -> dict[str, Any]:
        choice = {
            "index": 0,
            "message": _message_body(output),
            "logprobs": None,
            "finish_reason": _FINISH[output.finish],
        }
        body = _envelope(request, seq, "chat.completion")
        return {**body, "choices": [choice], "usage": _usage(usage, output)}

    def stream_frames(
        self, request: SimRequest, output: Output, usage: PromptUsage, seq: int
    ) -> list[Frame]:
        chunks = _Chunks(request, seq)
        role = {"role": "assistant", "content": "" if output.text else None, "refusal": None}
        frames = [chunks.delta(role)]
        for piece in text_pieces(output.reasoning):
            frames.append(chunks.delta({"reasoning_content": piece}, count_tokens(piece)))
        for piece in text_pieces(output.text):
            frames.append(chunks.delta({"content": piece}, count_tokens(piece)))
        for index, call in enumerate(output.tool_calls):
            frames += _tool_call_frames(chunks, index, call)
        frames.append(chunks.delta({}, finish=_FINISH[output.finish]))
        if request.include_usage:
            frames.append(chunks.frame([], usage=_usage(usage, output)))
        frames.append(Frame(b"data: [DONE]\n\n"))
        return frames
