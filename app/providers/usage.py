"""Token usage in four disjoint buckets, normalised from every upstream shape.

Providers disagree on whether prompt totals include cached tokens (Anthropic reports input
exclusive of cache, OpenAI-shaped bodies report an inclusive total with a breakdown). We
subtract on the way in so downstream code sees parts that never overlap: pricing each bucket
at its own rate then cannot double-charge a cached token.

The normalisers never raise: a usage block is accounting metadata that arrives after the
model has already answered, so a malformed count must not fail the turn. Anything that is
not a non-negative whole number of tokens reads as 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any


@dataclass(frozen=True, slots=True)
class Usage:
    """One upstream call's (or a turn's summed) usage. `prompt_tokens` is derived, never stored."""

    input_tokens: int = 0
    """Fresh (uncached) prompt tokens."""
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    """A breakdown of `output_tokens`, not a peer of it: never added to totals, and billed
    inside output unless the price table lists a distinct reasoning rate."""

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


# ------------------------------------------------------------------------------ parsing

# Whole numbers only: "17111" is a count some proxies send as a string, "1.5e3" or "12k"
# is not a count we can trust, and guessing would put invented tokens on a bill.
_DIGITS = re.compile(r"[+-]?\d+")


def _count(value: object) -> int:
    """One token count, coerced leniently and clamped to >= 0 (garbage reads as 0)."""
    # bool is an int subclass; `True` in a usage block is garbage, not "1 token".
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float):
        return max(int(value), 0) if math.isfinite(value) else 0
    if isinstance(value, Decimal):
        return max(int(value), 0) if value.is_finite() else 0
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        try:
            return max(int(value), 0)
        except ValueError:  # over Python's 4300-digit int-parsing limit: garbage, not tokens
            return 0
    return 0


def _get(raw: object, *path: str) -> object:
    """The value at `path` in nested mappings; None if a step is missing or not a mapping."""
    node: object = raw
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _max_count(raw: object, *paths: tuple[str, ...]) -> int:
    """The largest count among alternative spellings of the same quantity.

    Bodies relayed by proxies (LiteLLM, OpenRouter) often carry one number under two names,
    e.g. `prompt_tokens_details.cached_tokens` and `cache_read_input_tokens`. Summing them
    would double-count; taking the largest also survives one spelling being null.
    """
    return max((_count(_get(raw, *path)) for path in paths), default=0)


# -------------------------------------------------------------------------- normalisers


def usage_from_anthropic(raw: Mapping[str, Any]) -> Usage:
    """Normalise an Anthropic Messages `usage` block (input is already exclusive of cache)."""
    output = _count(_get(raw, "output_tokens"))
    # Newer bodies may break cache writes down by TTL without the flat total; accept either.
    split_writes = _count(_get(raw, "cache_creation", "ephemeral_5m_input_tokens")) + _count(
        _get(raw, "cache_creation", "ephemeral_1h_input_tokens")
    )
    reasoning = _max_count(raw, ("output_tokens_details", "thinking_tokens"))
    return Usage(
        input_tokens=_count(_get(raw, "input_tokens")),
        # A thinking count larger than output is contradictory; output is what is billed.
        output_tokens=max(output, reasoning),
        cache_read_tokens=_count(_get(raw, "cache_read_input_tokens")),
        cache_write_tokens=max(_count(_get(raw, "cache_creation_input_tokens")), split_writes),
        reasoning_tokens=reasoning,
    )


def usage_from_openai(raw: Mapping[str, Any]) -> Usage:
    """Normalise an OpenAI-shaped chat `usage` block, whose `prompt_tokens` includes cache.

    Also reads the relayed variants: DeepSeek's `prompt_cache_hit_tokens` /
    `prompt_cache_miss_tokens`, a top-level `cached_tokens`, and Anthropic-style
    `cache_read_input_tokens` / `cache_creation_input_tokens` that proxies copy onto an
    OpenAI body. In all of these the prompt total still includes the cached part.
    """
    cache_read = _max_count(
        raw,
        ("prompt_tokens_details", "cached_tokens"),
        ("cached_tokens",),
        ("prompt_cache_hit_tokens",),
        ("cache_read_input_tokens",),
    )
    cache_write = _max_count(
        raw,
        ("prompt_tokens_details", "cache_write_tokens"),
        ("cache_creation_input_tokens",),
    )
    # DeepSeek's hit + miss is the prompt total; it stands in when prompt_tokens is absent
    # and agrees with it otherwise, so the larger of the two is the total either way.
    hit_plus_miss = _count(_get(raw, "prompt_cache_hit_tokens")) + _count(
        _get(raw, "prompt_cache_miss_tokens")
    )
    prompt = max(_count(_get(raw, "prompt_tokens")), hit_plus_miss)
    reasoning = _count(_get(raw, "completion_tokens_details", "reasoning_tokens"))
    return Usage(
        # Clamped, not trusted: a body whose cached counts exceed its total is inconsistent,
        # and a negative fresh bucket would make pricing subtract money.
        input_tokens=max(prompt - cache_read - cache_write, 0),
        output_tokens=max(_count(_get(raw, "completion_tokens")), reasoning),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        reasoning_tokens=reasoning,
    )
