"""Fold provider events into one assistant reply; no I/O, so it is testable without a network."""

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


class ReplyBuilder:
    """The reply being streamed, folded in place: a part appended per event.

    A frozen reply rebuilt per event copied the whole text so far each time, quadratic in
    a long reply (a 40 KB answer in 10,000 chunks is about 200 MB of copying), and built an
    object per chunk on the hottest path there is.
    """

    __slots__ = ("_calls", "_reasoning", "_text", "events", "finish", "usage")

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, tuple[str | None, str | None, list[str]]] = {}
        self.usage: Usage | None = None
        self.finish: FinishReason | None = None
        self.events = 0

    def add(self, event: ProviderEvent) -> None:
        self.events += 1
        match event:
            case TextDelta():
                self._text.append(event.text)
            case ReasoningDelta():
                self._reasoning.append(event.text)
            case ToolCallDelta():
                call_id, name, arguments = self._calls.get(event.index, (None, None, []))
                arguments.append(event.arguments)
                self._calls[event.index] = (call_id or event.id, name or event.name, arguments)
            case UsageEvent():
                self.usage = event.usage
            case Finish():
                self.finish = event.reason
            case _:
                assert_never(event)

    def reply(self) -> Reply:
        """What has arrived so far, as a value."""
        calls = tuple(
            (index, PartialCall(call_id, name, "".join(arguments)))
            for index, (call_id, name, arguments) in self._calls.items()
        )
        return Reply(
            "".join(self._text),
            "".join(self._reasoning),
            calls,
            self.usage,
            self.finish,
            self.events,
        )
