"""A scripted provider: the upstream model for in-process tests, failing loudly.

Each step is what one upstream call streams: provider events in order, a `ProviderError`
raised where it stands. A call past the script, or a script left with unused steps, is the
test's failure, not the turn's: the loop turns any exception into an `internal_error` turn,
so the provider keeps what went wrong and `assert_done()` raises it (the `scripted`
fixture calls it after every test).

    provider = scripted(reply("hi"))                        # the `scripted` fixture
    handle = await Agent(store, settings, provider).launch("hello")  # tests/support/agent.py
    assert provider.requests[0].messages == (UserMessage("hello", cache=True),)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import pytest

from app.providers.base import (
    SAMPLING_FIELDS,
    Finish,
    ModelRequest,
    ProviderError,
    ProviderEvent,
    TextDelta,
    ToolCallDelta,
    UsageEvent,
)
from app.providers.usage import Usage


class Hold:
    """A point in a step where the stream stops until `release()`: `reached` is set when the
    stream gets there, so a test acts on a turn mid-reply without timing anything."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self._released = asyncio.Event()

    def release(self) -> None:
        self._released.set()

    async def wait(self) -> None:
        self.reached.set()
        await self._released.wait()


Step = Sequence[ProviderEvent | ProviderError | Hold]
"""One upstream call: its events in order; a ProviderError in it is raised at that point,
a Hold waits there."""

USAGE = Usage(input_tokens=100, output_tokens=10)


def reply(text: str, usage: Usage = USAGE) -> Step:
    """A plain answer, with the usage an upstream reports before its finish."""
    return (TextDelta(text), UsageEvent(usage), Finish("stop"))


def calls(*called: tuple[str, str, dict[str, Any]], text: str = "", usage: Usage = USAGE) -> Step:
    """An answer that calls tools: `(call id, tool name, arguments)` each."""
    events: list[ProviderEvent] = [TextDelta(text)] if text else []
    for index, (call_id, name, arguments) in enumerate(called):
        events.append(ToolCallDelta(index, call_id, name, json.dumps(arguments)))
    return (*events, UsageEvent(usage), Finish("tool_calls"))


class ScriptedProvider:
    """A `Provider` that streams its steps in order and records every request."""

    passthrough = frozenset(SAMPLING_FIELDS)
    prefill = False

    def __init__(self, *steps: Step) -> None:
        self._steps = list(steps)
        self.requests: list[ModelRequest] = []
        self.problems: list[str] = []
        self.closed_streams = 0
        """Streams that ended, run to the end or closed early by the caller."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        self.requests.append(request)
        if not self._steps:
            self.problems.append(f"unexpected upstream call #{len(self.requests)}")
            raise AssertionError(self.problems[-1])
        try:
            for item in self._steps.pop(0):
                if isinstance(item, ProviderError):
                    raise item
                if isinstance(item, Hold):
                    await item.wait()
                    continue
                yield item
        finally:
            self.closed_streams += 1

    async def aclose(self) -> None:
        pass

    def assert_done(self) -> None:
        problems = list(self.problems)
        if self._steps:
            problems.append(f"{len(self._steps)} scripted step(s) were never requested")
        if problems:
            raise AssertionError("scripted provider: " + "; ".join(problems))


Scripted = Callable[..., ScriptedProvider]
"""The `scripted` fixture's type: `scripted(*steps)` makes a provider."""


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    """Makes scripted providers; after the test, each must have been used exactly as written."""
    made: list[ScriptedProvider] = []

    def make(*steps: Step) -> ScriptedProvider:
        made.append(ScriptedProvider(*steps))
        return made[-1]

    yield make
    for provider in made:
        provider.assert_done()
