"""Fold provider events into one assistant reply; pure, so it is testable without a network."""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from app.providers.base import (
    Finish,
    FinishReason,
    ProviderEvent,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    UsageEvent,
)
from app.providers.usage import Usage


@dataclass(frozen=True, slots=True)
class PartialCall:
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class Reply:
    text: str = ""
    reasoning: str = ""
    calls: tuple[tuple[int, PartialCall], ...] = ()
    usage: Usage | None = None
    finish: FinishReason | None = None
    events: int = 0

    def tool_calls(self, id_prefix: str) -> tuple[ToolCall, ...]:
        """Completed calls in index order; a call the model sent without an id gets one."""
        return tuple(
            ToolCall(
                id=partial.id or f"{id_prefix}_{index}",
                name=partial.name or "",
                arguments=partial.arguments,
            )
            for index, partial in sorted(self.calls, key=lambda item: item[0])
        )


def _merge_call(calls: dict[int, PartialCall], index: int, fragment: PartialCall) -> None:
    current = calls.get(index, PartialCall())
    calls[index] = PartialCall(
        id=current.id or fragment.id,
        name=current.name or fragment.name,
        arguments=current.arguments + fragment.arguments,
    )


def accumulate(reply: Reply, event: ProviderEvent) -> Reply:
    # One constructor call per event: every streamed chunk folds through here, and two
    # `dataclasses.replace` calls (field introspection each) cost about 3x as much.
    text, reasoning, calls = reply.text, reply.reasoning, reply.calls
    usage, finish = reply.usage, reply.finish
    match event:
        case TextDelta():
            text += event.text
        case ReasoningDelta():
            reasoning += event.text
        case ToolCallDelta():
            merged = dict(calls)
            _merge_call(merged, event.index, PartialCall(event.id, event.name, event.arguments))
            calls = tuple(merged.items())
        case UsageEvent():
            usage = event.usage
        case Finish():
            finish = event.reason
        case _:
            assert_never(event)
    return Reply(text, reasoning, calls, usage, finish, reply.events + 1)
