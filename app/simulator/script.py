"""Scripted mode: a list of steps, each consumed by exactly one upstream request.

Step format (JSON), every key optional:

    {"expect": {"last_user_contains": str, "last_tool_result_contains": str,
                "has_tools": bool, "system_contains": str,
                "max_tokens": int | null, "temperature": float | null},
     "reply": {"text": str | null, "reasoning": str | null,
               "tool_calls": [{"name": str, "arguments": object | str, "id": str}],
               "finish_reason": "stop" | "tool_calls" | "length" | "content_filter"
                                | "end_turn" | "tool_use" | "max_tokens" | "stop_sequence"
                                | "refusal"},
     "fault": {"status": int, "retry_after": float, "message": str, "after_events": int,
               "drop_after_events": int, "delay_ms": float,
               "stall_after_events": int, "stall_ms": float, "garble_event": int}}

Semantics:

* Each `/v1/chat/completions` or `/v1/messages` request that passes auth and parses takes
  the next step (a fault step, or one whose request then overflows the context window,
  counts as used). An exhausted script or an unmet expectation answers HTTP 500
  "simulator: unexpected request: <why>" (with `x-should-retry: false`) and is appended to
  the failures that `GET /_sim/script` reports.
* `tool_calls[].arguments`: an object is emitted as compact JSON; a string verbatim (to
  script malformed JSON). Ids default to `call_<step>_<i>` / `toolu_<step>_<i>` (step
  1-based, i the 0-based index in the reply).
* Faults: `delay_ms` waits before the response headers; `status` answers that HTTP error
  in the wire's error shape (429 -> rate_limit, 529 -> overloaded, 5xx -> api/server error;
  `retry_after` sets the Retry-After header); with `after_events` on a streamed request the
  status goes out as 200 and the error arrives as an SSE event after that many events;
  `drop_after_events` sends that many SSE events (Anthropic `ping` and OpenAI `[DONE]`
  included) and closes the connection without finishing the body (a non-streamed body is
  cut at half its announced Content-Length); `stall_after_events` on a streamed request
  sends that many SSE events and then goes silent for `stall_ms` (default: an hour, a hung
  upstream) before sending the rest, so the caller's read timeout fires mid-body;
  `garble_event` sends the streamed event at that 0-based index with its JSON cut in half
  (an upstream or proxy that garbles its stream), and the rest as usual.

Scripts are validated when loaded, so a typo in a test fails at `POST /_sim/script`, not as
a confusing mismatch three requests later.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from app.simulator.request import SimRequest

Finish = Literal["stop", "tool_calls", "length", "stop_sequence", "content_filter"]

# Either wire's vocabulary is accepted, so a test can say what it means in the wire it tests.
FINISH_ALIASES: dict[str, Finish] = {
    "stop": "stop",
    "end_turn": "stop",
    "tool_calls": "tool_calls",
    "tool_use": "tool_calls",
    "length": "length",
    "max_tokens": "length",
    "stop_sequence": "stop_sequence",
    "content_filter": "content_filter",
    "refusal": "content_filter",
}


class ScriptError(ValueError):
    """A script that cannot be loaded; the message names the step and key."""


@dataclass(frozen=True, slots=True)
class ToolCallSpec:
    name: str
    arguments: str
    """The exact argument text to emit; objects are serialized compactly at load time."""
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    text: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[ToolCallSpec, ...] = ()
    finish_reason: Finish | None = None


@dataclass(frozen=True, slots=True)
class Fault:
    status: int | None = None
    retry_after: float | None = None
    message: str | None = None
    after_events: int | None = None
    """With `status` on a streamed request: send this many events, then the error in-stream."""
    drop_after_events: int | None = None
    delay_ms: float = 0.0
    stall_after_events: int | None = None
    """On a streamed request: send this many events, then go silent for `stall_ms`."""
    stall_ms: float = 3_600_000.0
    garble_event: int | None = None
    """On a streamed request: the event at this index goes out with its JSON cut in half."""


@dataclass(frozen=True, slots=True)
class Step:
    expect: Mapping[str, Any] = field(default_factory=dict)
    reply: Reply = field(default_factory=Reply)
    fault: Fault | None = None


# ------------------------------------------------------------------------------ loading


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ScriptError(f"{where} must be an object")
    return value


def _only(value: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ScriptError(f"{where}: unknown keys {unknown}")


def _optional(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    if value is None:
        return None
    # bool is an int subclass; `true` where a number belongs is a test bug worth reporting.
    fits = isinstance(value, bool) if kind is bool else isinstance(value, kind)
    if not fits or (kind is not bool and isinstance(value, bool)):
        raise ScriptError(f"{where} has the wrong type")
    return value


_EXPECT_TYPES: dict[str, type | tuple[type, ...]] = {
    "last_user_contains": str,
    "last_tool_result_contains": str,
    "system_contains": str,
    "has_tools": bool,
    "max_tokens": int,
    "temperature": (int, float),
}


def _expect(raw: Any, where: str) -> dict[str, Any]:
    expect = _object(raw, where)
    _only(expect, set(_EXPECT_TYPES), where)
    for key, value in expect.items():
        _optional(value, _EXPECT_TYPES[key], f"{where}.{key}")
    nullable = {"max_tokens", "temperature"}
    for key, value in expect.items():
        if value is None and key not in nullable:
            raise ScriptError(f"{where}.{key} must not be null")
    return expect


def _tool_call(raw: Any, where: str) -> ToolCallSpec:
    call = _object(raw, where)
    _only(call, {"name", "arguments", "id"}, where)
    name = call.get("name")
    if not isinstance(name, str):
        # An empty name is allowed: real models emit one, and the agent must cope.
        raise ScriptError(f"{where}.name must be a string")
    arguments = call.get("arguments", {})
    if not isinstance(arguments, str):
        # Compact like the real APIs; a raw string is kept verbatim to script malformed JSON.
        arguments = json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
    return ToolCallSpec(name, arguments, _optional(call.get("id"), str, f"{where}.id"))


def _reply(raw: Any, where: str) -> Reply:
    reply = _object(raw, where)
    _only(reply, {"text", "reasoning", "tool_calls", "finish_reason"}, where)
    calls = reply.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ScriptError(f"{where}.tool_calls must be a list")
    finish = reply.get("finish_reason")
    if finish is not None and finish not in FINISH_ALIASES:
        raise ScriptError(f"{where}.finish_reason {finish!r} is not one of {list(FINISH_ALIASES)}")
    return Reply(
        text=_optional(reply.get("text"), str, f"{where}.text"),
        reasoning=_optional(reply.get("reasoning"), str, f"{where}.reasoning"),
        tool_calls=tuple(_tool_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(calls)),
        finish_reason=FINISH_ALIASES[finish] if finish is not None else None,
    )


_FAULT_KEYS = {
    "status",
    "retry_after",
    "message",
    "after_events",
    "drop_after_events",
    "delay_ms",
    "stall_after_events",
    "stall_ms",
    "garble_event",
}


def _fault(raw: Any, where: str) -> Fault:
    fault = _object(raw, where)
    _only(fault, _FAULT_KEYS, where)
    status = _optional(fault.get("status"), int, f"{where}.status")
    if status is not None and not 400 <= status <= 599:
        raise ScriptError(f"{where}.status must be an HTTP error status")
    return Fault(
        status=status,
        retry_after=_optional(fault.get("retry_after"), (int, float), f"{where}.retry_after"),
        message=_optional(fault.get("message"), str, f"{where}.message"),
        after_events=_optional(fault.get("after_events"), int, f"{where}.after_events"),
        drop_after_events=_optional(
            fault.get("drop_after_events"), int, f"{where}.drop_after_events"
        ),
        delay_ms=float(_optional(fault.get("delay_ms"), (int, float), f"{where}.delay_ms") or 0),
        stall_after_events=_optional(
            fault.get("stall_after_events"), int, f"{where}.stall_after_events"
        ),
        stall_ms=float(
            _optional(fault.get("stall_ms"), (int, float), f"{where}.stall_ms") or 3_600_000.0
        ),
        garble_event=_optional(fault.get("garble_event"), int, f"{where}.garble_event"),
    )


def parse_step(raw: Any, number: int) -> Step:
    where = f"step {number}"
    step = _object(raw, where)
    _only(step, {"expect", "reply", "fault"}, where)
    fault = step.get("fault")
    return Step(
        expect=_expect(step.get("expect") or {}, f"{where}.expect"),
        reply=_reply(step.get("reply") or {}, f"{where}.reply"),
        fault=_fault(fault, f"{where}.fault") if fault is not None else None,
    )


def parse_script(raw: Any) -> list[Step]:
    """Steps from a JSON list, or from `{"steps": [...]}`."""
    if isinstance(raw, dict) and set(raw) == {"steps"}:
        raw = raw["steps"]
    if not isinstance(raw, list):
        raise ScriptError("a script is a list of steps (or {'steps': [...]})")
    return [parse_step(item, number) for number, item in enumerate(raw, start=1)]


# ------------------------------------------------------------------------------ checking


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _contains(want: str, got: str, what: str) -> str | None:
    return None if want in got else f"{what} does not contain {want!r} (got {_clip(got)!r})"


def _check_tool_results(want: str, request: SimRequest) -> str | None:
    contents = [result.content for result in request.last_tool_results]
    if any(want in content for content in contents):
        return None
    return f"last tool results do not contain {want!r} (got {[_clip(c) for c in contents]!r})"


def _equal(want: Any, got: Any, what: str) -> str | None:
    return None if want == got else f"{what} is {got!r}, expected {want!r}"


_CHECKS: dict[str, Callable[[Any, SimRequest], str | None]] = {
    "last_user_contains": lambda w, r: _contains(w, r.last_user_text, "last user text"),
    "last_tool_result_contains": _check_tool_results,
    "system_contains": lambda w, r: _contains(w, r.system_text, "system prompt"),
    "has_tools": lambda w, r: _equal(w, r.has_tools, "has_tools"),
    "max_tokens": lambda w, r: _equal(w, r.max_tokens, "max_tokens"),
    "temperature": lambda w, r: _equal(w, r.temperature, "temperature"),
}


def check_expectations(expect: Mapping[str, Any], request: SimRequest) -> str | None:
    """The first unmet expectation, described; None when the request matches."""
    for key, want in expect.items():
        problem = _CHECKS[key](want, request)
        if problem is not None:
            return problem
    return None


class Script:
    """The loaded steps and a cursor; exhausted scripts keep failing rather than improvise."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.used = 0

    @property
    def remaining(self) -> int:
        return len(self.steps) - self.used

    def take(self) -> tuple[int, Step] | None:
        """The next step and its 1-based number, or None once every step is used."""
        if self.used >= len(self.steps):
            return None
        self.used += 1
        return self.used, self.steps[self.used - 1]
