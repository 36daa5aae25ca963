"""The scripted provider fails loudly: a fake that quietly answered an unscripted call, or
left steps unused, would let a loop test pass that asked the model the wrong number of times."""

from __future__ import annotations

import contextlib

import pytest

from app.providers.base import ModelRequest, ProviderError, TextDelta, UserMessage
from tests.support.scripted import ScriptedProvider, reply

REQUEST = ModelRequest(model="m", system=(), messages=(UserMessage("hi"),))


async def _drain(provider: ScriptedProvider) -> list[object]:
    return [event async for event in provider.stream(REQUEST)]


async def test_an_unscripted_call_fails_even_where_the_caller_swallows_it() -> None:
    provider = ScriptedProvider(reply("one"))
    await _drain(provider)
    with contextlib.suppress(AssertionError):  # as the loop does: any exception ends a turn
        await _drain(provider)
    with pytest.raises(AssertionError, match="unexpected upstream call #2"):
        provider.assert_done()


async def test_unused_steps_fail() -> None:
    provider = ScriptedProvider(reply("one"), reply("two"))
    await _drain(provider)
    with pytest.raises(AssertionError, match="1 scripted step"):
        provider.assert_done()


async def test_an_error_is_raised_where_it_stands_and_the_request_recorded() -> None:
    provider = ScriptedProvider((TextDelta("half"), ProviderError("stream_dropped", "cut")))
    seen: list[object] = []
    with pytest.raises(ProviderError, match="cut"):
        async for event in provider.stream(REQUEST):
            seen.append(event)
    assert seen == [TextDelta("half")] and provider.requests == [REQUEST]
    assert provider.closed_streams == 1
    provider.assert_done()
