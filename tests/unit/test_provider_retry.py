"""stream_with_retry against a scripted fake provider that fails loudly on misuse."""

from __future__ import annotations

import pytest

from app.providers.base import (
    ErrorKind,
    Finish,
    ModelRequest,
    ProviderError,
    ProviderEvent,
    TextDelta,
    UserMessage,
)
from app.providers.retry import backoff_delay, stream_with_retry
from tests.support.scripted import ScriptedProvider, Step

REQUEST = ModelRequest(model="m", system=(), messages=(UserMessage("hi"),))


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


GOOD: Step = (TextDelta("ok"), Finish("stop"))


async def _run(
    provider: ScriptedProvider, sleep: Sleeps, *, max_attempts: int = 3
) -> list[ProviderEvent]:
    stream = stream_with_retry(provider, REQUEST, max_attempts=max_attempts, sleep=sleep)
    events = [event async for event in stream]
    provider.assert_done()
    assert all(request is REQUEST for request in provider.requests)
    return events


async def test_retry_after_wins_then_success() -> None:
    provider = ScriptedProvider(
        (ProviderError("rate_limited", "slow down", status=429, retry_after=3.0),), GOOD
    )
    sleep = Sleeps()
    assert await _run(provider, sleep) == list(GOOD)
    assert sleep.delays == [3.0]
    assert provider.closed_streams == 2


async def test_retry_after_is_capped() -> None:
    provider = ScriptedProvider((ProviderError("overloaded", "x", retry_after=5000.0),), GOOD)
    sleep = Sleeps()
    await _run(provider, sleep)
    assert sleep.delays == [600.0]


async def test_jittered_exponential_backoff_without_retry_after() -> None:
    provider = ScriptedProvider(
        (ProviderError("server_error", "a", status=500),),
        (ProviderError("connection", "b"),),
        GOOD,
    )
    sleep = Sleeps()
    assert await _run(provider, sleep) == list(GOOD)
    first, second = sleep.delays
    assert 1.0 <= first <= 2.0
    assert 2.0 <= second <= 4.0


def test_backoff_is_capped_by_max_delay() -> None:
    assert backoff_delay(10, base_delay=2.0, max_delay=60.0, jitter=lambda: 1.0) == 60.0
    assert backoff_delay(1, base_delay=2.0, max_delay=60.0, jitter=lambda: 0.0) == 1.0


async def test_gives_up_after_max_attempts() -> None:
    failure = ProviderError("overloaded", "busy", status=529)
    provider = ScriptedProvider((failure,), (failure,), (failure,))
    sleep = Sleeps()
    with pytest.raises(ProviderError) as caught:
        await _run(provider, sleep, max_attempts=3)
    assert caught.value is failure
    assert len(provider.requests) == 3 and len(sleep.delays) == 2


@pytest.mark.parametrize(
    "kind",
    ["bad_request", "content_policy", "not_found", "auth", "context_overflow", "stream_dropped"],
)
async def test_non_retryable_kinds_fail_first_time(kind: ErrorKind) -> None:
    provider = ScriptedProvider((ProviderError(kind, "no"),))
    sleep = Sleeps()
    with pytest.raises(ProviderError):
        await _run(provider, sleep)
    assert len(provider.requests) == 1 and sleep.delays == []


async def test_no_retry_once_output_was_yielded() -> None:
    provider = ScriptedProvider(
        (TextDelta("half"), ProviderError("server_error", "cut", status=500))
    )
    sleep = Sleeps()
    seen: list[ProviderEvent] = []
    with pytest.raises(ProviderError):
        async for event in stream_with_retry(provider, REQUEST, sleep=sleep):
            seen.append(event)
    assert seen == [TextDelta("half")]
    assert len(provider.requests) == 1 and sleep.delays == []


async def test_consumer_stopping_early_closes_the_attempt() -> None:
    provider = ScriptedProvider(GOOD)
    stream = stream_with_retry(provider, REQUEST, sleep=Sleeps())
    assert await anext(stream) == TextDelta("ok")
    await stream.aclose()  # type: ignore[attr-defined]
    assert provider.closed_streams == 1
