"""Folding a provider's event stream for adapter tests, with the stream contract checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from app.providers.base import (
    Finish,
    FinishReason,
    ModelRequest,
    Provider,
    ProviderError,
    ProviderEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageEvent,
)
from app.providers.usage import Usage


@dataclass
class Reply:
    """The folded stream, plus the raw event order for contract checks."""

    events: list[ProviderEvent]
    text: str = ""
    reasoning: str = ""
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    usage: Usage | None = None
    raw_usage: dict[str, Any] = field(default_factory=dict)
    finish: FinishReason | None = None


def fold(events: list[ProviderEvent]) -> Reply:
    reply = Reply(events)
    for event in events:
        match event:
            case TextDelta(text=text):
                reply.text += text
            case ReasoningDelta(text=text):
                reply.reasoning += text
            case ToolCallDelta(index=index, id=call_id, name=name, arguments=arguments):
                call = reply.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                call["id"] += call_id or ""
                call["name"] += name or ""
                call["arguments"] += arguments
            case UsageEvent(usage=usage, raw=raw):
                reply.usage, reply.raw_usage = usage, raw
            case Finish(reason=reason):
                reply.finish = reason
    # The contract: exactly one Finish, last; at most one usage, right before it.
    assert [type(e) for e in events].count(Finish) == 1 and isinstance(events[-1], Finish)
    usage_positions = [i for i, e in enumerate(events) if isinstance(e, UsageEvent)]
    assert usage_positions in ([], [len(events) - 2])
    return reply


async def run(provider: Provider, request: ModelRequest) -> Reply:
    return fold([event async for event in provider.stream(request)])


async def stream_error(provider: Provider, request: ModelRequest) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        async for _ in provider.stream(request):
            pass
    return caught.value
