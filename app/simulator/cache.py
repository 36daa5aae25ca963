"""Prompt-cache accounting for both wires, on a clock tests can move.

Anthropic caches only at explicit `cache_control` breakpoints: the longest breakpoint
prefix already cached is *read*, the tokens from there to the last cacheable breakpoint are
*written*, the rest is fresh input. OpenAI caches automatically: every prefix of
`min_cacheable_tokens + k * 128` tokens is stored, and a request reads the longest one seen
before. Entries live for their TTL after their last use (reads refresh them).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from app.simulator.request import Breakpoint
from app.simulator.token_count import Segment, segment_digests, token_digests

OPENAI_CACHE_STEP = 128
_PURGE_AT = 200_000
"""Entry count that triggers dropping expired entries, so long demos stay bounded."""


class SimClock:
    """Wall-clock time plus a test-controlled offset, so TTLs expire without real waiting."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


class PromptCache:
    """Prefix digests -> expiry time on the simulated clock."""

    def __init__(self) -> None:
        self._expires: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._expires)

    def clear(self) -> None:
        self._expires.clear()

    def contains(self, digest: str, now: float) -> bool:
        expires = self._expires.get(digest)
        return expires is not None and expires > now

    def store(self, digest: str, now: float, ttl: float) -> None:
        # A shorter TTL never cuts an entry another request stored for longer.
        self._expires[digest] = max(self._expires.get(digest, 0.0), now + ttl)
        if len(self._expires) > _PURGE_AT:
            self._expires = {d: t for d, t in self._expires.items() if t > now}


@dataclass(frozen=True, slots=True)
class PromptUsage:
    """A prompt's tokens split into disjoint buckets."""

    total: int
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0

    @property
    def cache_write(self) -> int:
        return self.cache_write_5m + self.cache_write_1h

    @property
    def fresh_input(self) -> int:
        return self.total - self.cache_read - self.cache_write


LOOKBACK_BLOCKS = 20
"""How many block boundaries before a breakpoint Anthropic checks for an earlier hit."""


def _cumulative(segments: Sequence[Segment]) -> list[int]:
    sums: list[int] = []
    running = 0
    for segment in segments:
        running += segment.tokens
        sums.append(running)
    return sums


def anthropic_usage(
    cache: PromptCache,
    now: float,
    *,
    namespace: str,
    segments: Sequence[Segment],
    breakpoints: Sequence[Breakpoint],
    min_tokens: int,
) -> PromptUsage:
    """Read the longest cached breakpoint prefix, write up to the last breakpoint, store all."""
    ends = _cumulative(segments)
    total = ends[-1] if ends else 0
    eligible = sorted(
        (bp for bp in breakpoints if ends[bp.segment_index] >= min_tokens),
        key=lambda bp: bp.segment_index,
    )
    if not eligible:
        return PromptUsage(total)
    digests = segment_digests(namespace, segments)
    # Like the real API, each breakpoint also looks back over the ~20 block boundaries
    # before it for an earlier entry, so a prefix cached by the previous request at a
    # boundary this request does not mark is still read.
    read = max(
        (
            ends[index]
            for bp in eligible
            for index in range(bp.segment_index, max(bp.segment_index - LOOKBACK_BLOCKS, -1), -1)
            if cache.contains(digests[index], now)
        ),
        default=0,
    )
    write_5m = write_1h = 0
    previous = read
    for bp in eligible:
        end = ends[bp.segment_index]
        if end > previous:
            # Each span is billed at the TTL of the breakpoint that closes it.
            if bp.ttl_seconds > 300:
                write_1h += end - previous
            else:
                write_5m += end - previous
            previous = end
        cache.store(digests[bp.segment_index], now, bp.ttl_seconds)
    return PromptUsage(total, read, write_5m, write_1h)


def openai_usage(
    cache: PromptCache,
    now: float,
    *,
    namespace: str,
    segments: Sequence[Segment],
    min_tokens: int,
    ttl: float,
) -> PromptUsage:
    """Read the longest stored grid prefix; store every grid prefix of this prompt."""
    total = sum(segment.tokens for segment in segments)
    first = max(min_tokens, 1)
    if total < first:
        return PromptUsage(total)
    positions = list(range(first, total + 1, OPENAI_CACHE_STEP))
    digests = token_digests(namespace, segments, positions)
    read = max((p for p in positions if cache.contains(digests[p], now)), default=0)
    for position in positions:
        cache.store(digests[position], now, ttl)
    return PromptUsage(total, read)
