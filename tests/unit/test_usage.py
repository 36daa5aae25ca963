"""Usage normalisation: every upstream shape lands in the same four disjoint buckets."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pytest

from app.providers.usage import Usage, usage_from_anthropic, usage_from_openai

# One real 17,111-token prompt sent three times: unmarked, then with a cache breakpoint
# (first write), then again (read). The prompt total must be 17,111 every time.
PROMPT = 17_111
CACHED = 17_102
FRESH = PROMPT - CACHED  # 9

ANTHROPIC_CASES: list[tuple[str, Mapping[str, Any], Usage]] = [
    (
        "17111 call 1: unmarked",
        {"input_tokens": PROMPT, "output_tokens": 50},
        Usage(input_tokens=PROMPT, output_tokens=50),
    ),
    (
        "17111 call 2: cache write",
        {
            "input_tokens": FRESH,
            "cache_creation_input_tokens": CACHED,
            "cache_read_input_tokens": 0,
            "output_tokens": 50,
        },
        Usage(input_tokens=FRESH, output_tokens=50, cache_write_tokens=CACHED),
    ),
    (
        "17111 call 3: cache read",
        {
            "input_tokens": FRESH,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": CACHED,
            "output_tokens": 50,
        },
        Usage(input_tokens=FRESH, output_tokens=50, cache_read_tokens=CACHED),
    ),
    (
        "cache fields null",
        {
            "input_tokens": 12,
            "cache_creation_input_tokens": None,
            "cache_read_input_tokens": None,
            "output_tokens": 3,
        },
        Usage(input_tokens=12, output_tokens=3),
    ),
    (
        "write split by TTL only",
        {
            "input_tokens": 5,
            "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 20},
            "output_tokens": 1,
        },
        Usage(input_tokens=5, output_tokens=1, cache_write_tokens=120),
    ),
    (
        "write total and TTL split agree: not double-counted",
        {
            "input_tokens": 5,
            "cache_creation_input_tokens": 120,
            "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 20},
            "output_tokens": 1,
        },
        Usage(input_tokens=5, output_tokens=1, cache_write_tokens=120),
    ),
    (
        "thinking breakdown",
        {"input_tokens": 5, "output_tokens": 40, "output_tokens_details": {"thinking_tokens": 30}},
        Usage(input_tokens=5, output_tokens=40, reasoning_tokens=30),
    ),
    (
        "digit strings",
        {"input_tokens": "9", "cache_read_input_tokens": " 17102 ", "output_tokens": "50"},
        Usage(input_tokens=FRESH, output_tokens=50, cache_read_tokens=CACHED),
    ),
    (
        "negatives clamped",
        {"input_tokens": -5, "cache_read_input_tokens": -1, "output_tokens": -7},
        Usage(),
    ),
    (
        "garbage reads as 0",
        {
            "input_tokens": "lots",
            "cache_read_input_tokens": [1, 2],
            "cache_creation_input_tokens": {"n": 1},
            "output_tokens": True,
        },
        Usage(),
    ),
    ("empty", {}, Usage()),
]

OPENAI_CASES: list[tuple[str, Mapping[str, Any], Usage]] = [
    (
        "17111 call 1: no cache",
        {"prompt_tokens": PROMPT, "completion_tokens": 50, "total_tokens": PROMPT + 50},
        Usage(input_tokens=PROMPT, output_tokens=50),
    ),
    (
        "17111 cache read via prompt_tokens_details",
        {
            "prompt_tokens": PROMPT,
            "completion_tokens": 50,
            "prompt_tokens_details": {"cached_tokens": CACHED},
        },
        Usage(input_tokens=FRESH, output_tokens=50, cache_read_tokens=CACHED),
    ),
    (
        "17111 cache write via prompt_tokens_details (OpenRouter)",
        {
            "prompt_tokens": PROMPT,
            "completion_tokens": 50,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": CACHED},
        },
        Usage(input_tokens=FRESH, output_tokens=50, cache_write_tokens=CACHED),
    ),
    (
        "Anthropic-style fields relayed on an OpenAI body (LiteLLM): read",
        {
            "prompt_tokens": PROMPT,
            "completion_tokens": 50,
            "prompt_tokens_details": {"cached_tokens": CACHED},
            "cache_read_input_tokens": CACHED,
            "cache_creation_input_tokens": 0,
        },
        Usage(input_tokens=FRESH, output_tokens=50, cache_read_tokens=CACHED),
    ),
    (
        "Anthropic-style fields relayed on an OpenAI body: write",
        {"prompt_tokens": PROMPT, "completion_tokens": 50, "cache_creation_input_tokens": CACHED},
        Usage(input_tokens=FRESH, output_tokens=50, cache_write_tokens=CACHED),
    ),
    (
        "DeepSeek hit/miss with prompt_tokens",
        {
            "prompt_tokens": PROMPT,
            "prompt_cache_hit_tokens": CACHED,
            "prompt_cache_miss_tokens": FRESH,
            "completion_tokens": 50,
        },
        Usage(input_tokens=FRESH, output_tokens=50, cache_read_tokens=CACHED),
    ),
    (
        "DeepSeek hit/miss without prompt_tokens",
        {"prompt_cache_hit_tokens": CACHED, "prompt_cache_miss_tokens": FRESH},
        Usage(input_tokens=FRESH, cache_read_tokens=CACHED),
    ),
    (
        "top-level cached_tokens",
        {"prompt_tokens": PROMPT, "cached_tokens": CACHED, "completion_tokens": 50},
        Usage(input_tokens=FRESH, output_tokens=50, cache_read_tokens=CACHED),
    ),
    (
        "reasoning breakdown",
        {
            "prompt_tokens": 10,
            "completion_tokens": 300,
            "completion_tokens_details": {"reasoning_tokens": 256},
        },
        Usage(input_tokens=10, output_tokens=300, reasoning_tokens=256),
    ),
    (
        "reasoning larger than completion: output raised to cover it",
        {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "completion_tokens_details": {"reasoning_tokens": 8},
        },
        Usage(input_tokens=10, output_tokens=8, reasoning_tokens=8),
    ),
    (
        "details null",
        {
            "prompt_tokens": 10,
            "completion_tokens": 2,
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        },
        Usage(input_tokens=10, output_tokens=2),
    ),
    (
        "details not a mapping",
        {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": "cached"},
        Usage(input_tokens=10, output_tokens=2),
    ),
    (
        "digit strings and whole floats",
        {
            "prompt_tokens": "17111",
            "completion_tokens": 50.0,
            "prompt_tokens_details": {"cached_tokens": "17102"},
        },
        Usage(input_tokens=FRESH, output_tokens=50, cache_read_tokens=CACHED),
    ),
    (
        "Decimal counts",
        {"prompt_tokens": Decimal(20), "completion_tokens": Decimal(3)},
        Usage(input_tokens=20, output_tokens=3),
    ),
    (
        "cached larger than prompt: fresh clamped to 0",
        {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 150}},
        Usage(input_tokens=0, cache_read_tokens=150),
    ),
    (
        "negatives clamped",
        {
            "prompt_tokens": -10,
            "completion_tokens": -1,
            "prompt_tokens_details": {"cached_tokens": -4},
        },
        Usage(),
    ),
    (
        "garbage reads as 0",
        {
            "prompt_tokens": "many",
            "completion_tokens": float("nan"),
            "prompt_tokens_details": {"cached_tokens": float("inf")},
            "cached_tokens": "1.5e3",
            "completion_tokens_details": {"reasoning_tokens": object()},
        },
        Usage(),
    ),
    ("absurdly long digit string", {"prompt_tokens": "9" * 5000}, Usage()),
    ("empty", {}, Usage()),
]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [pytest.param(raw, expected, id=name) for name, raw, expected in ANTHROPIC_CASES],
)
def test_usage_from_anthropic(raw: Mapping[str, Any], expected: Usage) -> None:
    assert usage_from_anthropic(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [pytest.param(raw, expected, id=name) for name, raw, expected in OPENAI_CASES],
)
def test_usage_from_openai(raw: Mapping[str, Any], expected: Usage) -> None:
    assert usage_from_openai(raw) == expected


def test_17111_sequence_keeps_prompt_total_on_both_wires() -> None:
    anthropic = [usage_from_anthropic(raw) for name, raw, _ in ANTHROPIC_CASES[:3]]
    assert [u.prompt_tokens for u in anthropic] == [PROMPT, PROMPT, PROMPT]
    assert [u.total_tokens for u in anthropic] == [PROMPT + 50] * 3

    openai = usage_from_openai(
        {"prompt_tokens": PROMPT, "prompt_tokens_details": {"cached_tokens": CACHED}}
    )
    assert openai == Usage(input_tokens=FRESH, cache_read_tokens=CACHED)
    assert openai.prompt_tokens == PROMPT
    # Same call, either wire: identical buckets, so identical cost downstream.
    assert openai == usage_from_anthropic(
        {"input_tokens": FRESH, "cache_read_input_tokens": CACHED}
    )


@pytest.mark.parametrize("raw", [None, "usage", 17111, [1, 2, 3]])
def test_non_mapping_never_raises(raw: Any) -> None:
    assert usage_from_anthropic(raw) == Usage()
    assert usage_from_openai(raw) == Usage()


def test_buckets_are_never_negative() -> None:
    for _, raw, _ in ANTHROPIC_CASES + OPENAI_CASES:
        for usage in (usage_from_anthropic(raw), usage_from_openai(raw)):
            assert (
                min(
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.cache_read_tokens,
                    usage.cache_write_tokens,
                    usage.reasoning_tokens,
                )
                >= 0
            )


def test_addition_sums_every_bucket() -> None:
    a = Usage(input_tokens=1, output_tokens=2, cache_read_tokens=3, cache_write_tokens=4)
    b = Usage(input_tokens=10, output_tokens=20, reasoning_tokens=5)
    assert a + b == Usage(
        input_tokens=11,
        output_tokens=22,
        cache_read_tokens=3,
        cache_write_tokens=4,
        reasoning_tokens=5,
    )
    assert (a + b).prompt_tokens == 18
    # Reasoning is inside output, so it never inflates the total.
    assert (a + b).total_tokens == 40
