"""Retry a provider stream, but only while a retry cannot duplicate output.

Once an attempt has yielded an event the caller may already have shown or stored it, so a
second attempt would repeat text (or re-issue a tool call); from then on a failure is the
caller's to handle. Before that point, retryable kinds are retried with the upstream's
Retry-After if it sent one, else jittered exponential backoff.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable

from app.providers.base import ModelRequest, Provider, ProviderError, ProviderEvent
from app.providers.errors import RETRY_AFTER_CAP

log = logging.getLogger(__name__)


def backoff_delay(
    attempt: int,
    *,
    base_delay: float,
    max_delay: float,
    retry_after: float | None = None,
    jitter: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based).

    An upstream Retry-After wins over our schedule (it knows its own quota window) but is
    capped; otherwise base * 2^(attempt-1), capped at `max_delay`, scaled into [50%, 100%]
    so that many sessions throttled at once do not come back in lockstep.
    """
    if retry_after is not None:
        return min(max(retry_after, 0.0), RETRY_AFTER_CAP)
    ceiling = min(base_delay * 2.0 ** (attempt - 1), max_delay)
    return ceiling * (0.5 + 0.5 * jitter())


async def stream_with_retry(
    provider: Provider,
    request: ModelRequest,
    *,
    max_attempts: int = 3,
    base_delay: float = 2.0,
    max_delay: float = 60.0,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> AsyncIterator[ProviderEvent]:
    """`provider.stream(request)`, re-run on retryable errors raised before any output."""
    attempt = 0
    while True:
        attempt += 1
        yielded = False
        stream: AsyncIterator[ProviderEvent] | None = None
        try:
            stream = provider.stream(request)
            async for event in stream:
                yielded = True
                yield event
            return
        except ProviderError as error:
            if yielded or not error.retryable or attempt >= max_attempts:
                raise
            delay = backoff_delay(
                attempt, base_delay=base_delay, max_delay=max_delay, retry_after=error.retry_after
            )
            log.warning(
                "provider attempt %d/%d failed (%s, status %s); retrying in %.1fs",
                attempt,
                max_attempts,
                error.kind,
                error.status,
                delay,
            )
        finally:
            # Release the failed (or abandoned) attempt's connection before the next one.
            aclose = getattr(stream, "aclose", None)  # None for a plain iterator (or none)
            if aclose is not None:
                await aclose()
        await sleep(delay)
