"""What the simulated model emits for one request, after stop strings and max_tokens.

Emission order is reasoning, then text, then tool calls; `max_tokens` is spent in that
order, so a tight limit truncates the text (finish "length") or leaves the last tool call's
arguments cut mid-JSON, as a real model does when it runs out of budget.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from app.simulator.script import Finish, Reply, ToolCallSpec
from app.simulator.token_count import BYTES_PER_TOKEN, count_tokens


@dataclass(frozen=True, slots=True)
class OutToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Output:
    reasoning: str
    text: str
    tool_calls: tuple[OutToolCall, ...]
    finish: Finish
    stop_sequence: str | None = None

    @property
    def reasoning_tokens(self) -> int:
        return count_tokens(self.reasoning)

    @property
    def output_tokens(self) -> int:
        calls = sum(count_tokens(call.arguments) for call in self.tool_calls)
        return self.reasoning_tokens + count_tokens(self.text) + calls

    @property
    def signature(self) -> str:
        """Deterministic stand-in for Anthropic's opaque thinking signature."""
        return "sim_sig_" + hashlib.sha256(self.reasoning.encode("utf-8")).hexdigest()[:32]


def _truncate(text: str, tokens: int) -> str:
    # Cutting bytes can split a UTF-8 sequence; dropping the fragment keeps the count <= limit.
    cut = text.encode("utf-8")[: tokens * BYTES_PER_TOKEN]
    return cut.decode("utf-8", errors="ignore")


def _apply_stop(text: str, stop: Sequence[str]) -> tuple[str, str | None]:
    hits = [(text.find(s), s) for s in stop if s and s in text]
    if not hits:
        return text, None
    position, sequence = min(hits)
    return text[:position], sequence


class _Budget:
    """Hands out output tokens in emission order; None means unlimited."""

    def __init__(self, limit: int | None) -> None:
        self.left = limit
        self.exhausted = False

    def take(self, text: str) -> str:
        if self.left is None or self.exhausted:
            return "" if self.exhausted else text
        need = count_tokens(text)
        if need <= self.left:
            self.left -= need
            return text
        self.exhausted = True
        return _truncate(text, self.left)


def _call_id(spec: ToolCallSpec, prefix: str, step: int, index: int) -> str:
    return spec.id or f"{prefix}_{step}_{index}"


def build_output(
    reply: Reply,
    *,
    max_tokens: int | None,
    stop: Sequence[str],
    id_prefix: str,
    step: int,
) -> Output:
    """Apply the request's limits to a reply; ids default to `<id_prefix>_<step>_<index>`."""
    text, stop_hit = _apply_stop(reply.text or "", stop)
    # A model that hit a stop string never got as far as its tool calls.
    specs = () if stop_hit else reply.tool_calls
    budget = _Budget(max_tokens)
    reasoning = budget.take(reply.reasoning or "")
    text = budget.take(text)
    calls: list[OutToolCall] = []
    for index, spec in enumerate(specs):
        if budget.exhausted:
            break
        arguments = budget.take(spec.arguments)
        if budget.exhausted and not arguments:
            break
        calls.append(OutToolCall(_call_id(spec, id_prefix, step, index), spec.name, arguments))
    finish = _finish(reply, bool(calls), stop_hit, budget.exhausted)
    return Output(reasoning, text, tuple(calls), finish, stop_hit)


def _finish(reply: Reply, has_calls: bool, stop_hit: str | None, exhausted: bool) -> Finish:
    if reply.finish_reason is not None:
        return reply.finish_reason
    if exhausted:
        return "length"
    if stop_hit is not None:
        return "stop_sequence"
    return "tool_calls" if has_calls else "stop"


_WORD = re.compile(r"\s*\S+\s*|\s+")
ARGUMENT_FRAGMENT_CHARS = 12


def text_pieces(text: str) -> list[str]:
    """Word-sized deltas (each word with its trailing space); they join back to `text`."""
    return _WORD.findall(text)


def argument_pieces(arguments: str) -> list[str]:
    """Fixed-size fragments, so streamed JSON is split mid-token like real tool calls."""
    size = ARGUMENT_FRAGMENT_CHARS
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]
