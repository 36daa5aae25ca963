"""Pricing: each disjoint bucket at its own rate, or an honest `unknown`.

Expected figures are computed by hand from the rates printed in genai-prices 0.2.3's
bundled data (quoted beside each test), not by calling the code under test a second way.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from decimal import Decimal

import genai_prices
import pytest

from app.providers import pricing
from app.providers.pricing import Cost, PriceOverride, price_usage, prices_version
from app.providers.usage import Usage, usage_from_anthropic

AT = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
M = Decimal(1_000_000)
SOURCE = f"genai-prices {genai_prices.__version__}"


def test_version_is_the_source() -> None:
    assert prices_version() == SOURCE == "genai-prices 0.2.3"


def test_genai_prices_input_tokens_include_cache_tokens() -> None:
    """Pin the library behaviour our conversion relies on.

    If genai-prices' input_tokens were exclusive of cache, 1,000 input + 800 cache read
    would cost 1000*3 + 800*0.3. It costs 200*3 + 800*0.3: the cache read is carved out of
    input_tokens, so we must hand it the inclusive prompt total.
    """
    calc = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=1_000, cache_read_tokens=800),
        "claude-sonnet-4-5",
        provider_id="anthropic",
        genai_request_timestamp=AT,
    )
    assert calc.total_price == (200 * Decimal(3) + 800 * Decimal("0.3")) / M
    # And it bills cache reads at the *input* rate for a model lacking a cache-read rate,
    # which is the silent partial-truth `price_usage` refuses to return.
    calc = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=1_000, cache_read_tokens=800),
        "claude-2",
        provider_id="anthropic",
        genai_request_timestamp=AT,
    )
    assert calc.total_price == 1_000 * Decimal(8) / M


@pytest.mark.parametrize(
    ("usage", "expected_per_mtok"),
    [
        pytest.param(
            Usage(input_tokens=17_111, output_tokens=50),
            17_111 * Decimal(3) + 50 * Decimal(15),
            id="17111 unmarked",
        ),
        pytest.param(
            Usage(input_tokens=9, cache_write_tokens=17_102, output_tokens=50),
            9 * Decimal(3) + 17_102 * Decimal("3.75") + 50 * Decimal(15),
            id="17111 cache write",
        ),
        pytest.param(
            Usage(input_tokens=9, cache_read_tokens=17_102, output_tokens=50),
            9 * Decimal(3) + 17_102 * Decimal("0.3") + 50 * Decimal(15),
            id="17111 cache read",
        ),
        pytest.param(
            # Exactly 200K prompt tokens: the tier starts *above* 200K, so base rates.
            Usage(input_tokens=20_000, cache_read_tokens=180_000, output_tokens=1_000),
            20_000 * Decimal(3) + 180_000 * Decimal("0.3") + 1_000 * Decimal(15),
            id="200K prompt stays on base rates",
        ),
        pytest.param(
            # Fresh input alone is only 10K, but the prompt is 210K: the long-context tier
            # applies to every bucket, which only happens because genai-prices sees the
            # inclusive prompt total.
            Usage(
                input_tokens=10_000,
                cache_read_tokens=180_000,
                cache_write_tokens=20_000,
                output_tokens=2_000,
            ),
            10_000 * Decimal(6)
            + 180_000 * Decimal("0.6")
            + 20_000 * Decimal("7.5")
            + 2_000 * Decimal("22.5"),
            id="over 200K prompt uses long-context tier",
        ),
    ],
)
def test_claude_sonnet_by_hand(usage: Usage, expected_per_mtok: Decimal) -> None:
    cost = price_usage(usage, model="claude-sonnet-4-5", provider="anthropic", at=AT)
    assert cost == Cost(expected_per_mtok / M, "estimated", SOURCE)


def test_long_context_figure() -> None:
    usage = Usage(
        input_tokens=10_000,
        cache_read_tokens=180_000,
        cache_write_tokens=20_000,
        output_tokens=2_000,
    )
    cost = price_usage(usage, model="claude-sonnet-4-5", at=AT)
    # 60,000 + 108,000 + 150,000 + 45,000 = 363,000 USD-per-MTok-tokens = $0.363
    assert cost.amount == Decimal("0.363")


def test_matches_genai_prices_own_anthropic_extractor() -> None:
    """Independent cross-check: genai-prices parsing the raw body prices it the same."""
    usage = {
        "input_tokens": 9,
        "cache_creation_input_tokens": 1_000,
        "cache_read_input_tokens": 17_102,
        "output_tokens": 50,
    }
    body = {"model": "claude-sonnet-4-5", "usage": usage}
    theirs = genai_prices.extract_usage(body, provider_id="anthropic").calc_price(
        genai_request_timestamp=AT
    )
    ours = price_usage(usage_from_anthropic(usage), model="claude-sonnet-4-5", at=AT)
    assert ours.amount == theirs.total_price


@pytest.mark.parametrize(
    ("model", "provider", "usage", "expected_per_mtok"),
    [
        (
            "gpt-4o",
            "openai",
            Usage(input_tokens=9, cache_read_tokens=17_102, output_tokens=50),
            9 * Decimal("2.5") + 17_102 * Decimal("1.25") + 50 * Decimal(10),
        ),
        (
            "gpt-4o-mini",
            None,
            Usage(input_tokens=1_000, output_tokens=1_000, reasoning_tokens=400),
            # reasoning is inside output: billed once, at the output rate
            1_000 * Decimal("0.15") + 1_000 * Decimal("0.6"),
        ),
        ("claude-2", None, Usage(input_tokens=1_000, output_tokens=10), 8_000 + 10 * Decimal(24)),
        (
            "claude-sonnet-4-5-20250929",
            "anthropic",
            Usage(input_tokens=100),
            100 * Decimal(3),
        ),
    ],
)
def test_model_ids_resolve(
    model: str, provider: str | None, usage: Usage, expected_per_mtok: Decimal
) -> None:
    cost = price_usage(usage, model=model, provider=provider, at=AT)
    assert cost.status == "estimated"
    assert cost.amount == expected_per_mtok / M
    assert cost.source == SOURCE


@pytest.mark.parametrize("provider", [None, "anthropic", "openai"])
def test_made_up_model_is_unknown(provider: str | None) -> None:
    cost = price_usage(
        Usage(input_tokens=10, output_tokens=5), model="zz-made-up-9000", provider=provider
    )
    assert cost.amount is None
    assert cost.status == "unknown"
    assert cost.source == SOURCE
    assert "zz-made-up-9000" in cost.notes[0]
    assert cost.amount_float is None


def test_missing_cache_read_rate_is_unknown_not_partial() -> None:
    cost = price_usage(
        Usage(input_tokens=100, cache_read_tokens=1_000, output_tokens=10), model="claude-2", at=AT
    )
    assert cost == Cost(
        None,
        "unknown",
        SOURCE,
        ("genai-prices 0.2.3 has no cache read rate for anthropic/claude-2",),
    )


def test_missing_cache_write_rate_is_unknown() -> None:
    cost = price_usage(Usage(input_tokens=1, cache_write_tokens=5), model="gpt-4o", at=AT)
    assert cost.status == "unknown"
    assert cost.notes == ("genai-prices 0.2.3 has no cache write rate for openai/gpt-4o",)


def test_provider_hint_that_does_not_list_the_model_falls_back_with_a_note() -> None:
    cost = price_usage(Usage(input_tokens=1_000), model="deepseek-chat", provider="openai", at=AT)
    assert cost.status == "estimated"
    assert cost.amount is not None
    assert "deepseek/deepseek-chat" in cost.notes[0]


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "zz-made-up-9000"])
def test_all_zero_usage_costs_zero(model: str) -> None:
    assert price_usage(Usage(), model=model) == Cost(Decimal(0), "estimated", SOURCE)
    # Reasoning alone is a breakdown of nothing billable.
    assert price_usage(Usage(reasoning_tokens=3), model=model).amount == 0


OVERRIDE = PriceOverride(
    input_per_mtok=Decimal(2),
    output_per_mtok=Decimal(8),
    cache_read_per_mtok=Decimal("0.5"),
    cache_write_per_mtok=Decimal("2.5"),
)


def test_override_prices_each_bucket() -> None:
    usage = Usage(
        input_tokens=1_000, cache_read_tokens=4_000, cache_write_tokens=2_000, output_tokens=500
    )
    cost = price_usage(usage, model="claude-sonnet-4-5", override=OVERRIDE)
    # 2,000 + 2,000 + 5,000 + 4,000 = 13,000 per MTok
    assert cost == Cost(Decimal("0.013"), "estimated", "config override")


def test_override_applies_to_models_the_table_does_not_know() -> None:
    cost = price_usage(Usage(input_tokens=1_000_000), model="local", override=OVERRIDE)
    assert cost.amount == Decimal(2)


def test_override_without_cache_read_rate_is_unknown() -> None:
    override = PriceOverride(input_per_mtok=Decimal(1), output_per_mtok=Decimal(2))
    cost = price_usage(
        Usage(input_tokens=10, cache_read_tokens=5, cache_write_tokens=1),
        model="x",
        override=override,
    )
    assert cost == Cost(
        None,
        "unknown",
        "config override",
        ("config override has no cache read or cache write rate",),
    )
    # The same override is fine while those buckets are empty.
    assert price_usage(Usage(input_tokens=10), model="x", override=override).status == "estimated"


def test_included_override_costs_zero() -> None:
    cost = price_usage(
        Usage(input_tokens=10, cache_read_tokens=5),
        model="x",
        override=PriceOverride(included=True),
    )
    assert cost == Cost(Decimal(0), "included", "config override")


@pytest.mark.parametrize("bad", [Decimal(-1), Decimal("NaN"), Decimal("Infinity")])
def test_override_rejects_bad_rates(bad: Decimal) -> None:
    with pytest.raises(ValueError, match="input_per_mtok"):
        PriceOverride(input_per_mtok=bad)


def test_cost_addition_sums_and_joins_sources() -> None:
    a = Cost(Decimal("0.10"), "estimated", SOURCE)
    b = Cost(Decimal("0.05"), "estimated", "config override", ("note b",))
    c = Cost(Decimal("0.01"), "estimated", SOURCE, ("note b",))
    total = a + b + c
    assert total == Cost(Decimal("0.16"), "estimated", f"{SOURCE} + config override", ("note b",))
    assert total.amount_float == pytest.approx(0.16)


def test_unknown_poisons_a_sum() -> None:
    known = Cost(Decimal(1), "estimated", SOURCE)
    unknown = Cost(None, "unknown", SOURCE, ("no cache read rate",))
    for total in (known + unknown, unknown + known):
        assert total.amount is None
        assert total.status == "unknown"
        assert total.source == SOURCE
        assert total.notes == ("no cache read rate",)


def test_included_plus_estimated_is_estimated() -> None:
    included = Cost(Decimal(0), "included", "config override")
    assert (included + included).status == "included"
    total = included + Cost(Decimal(2), "estimated", SOURCE)
    assert total == Cost(Decimal(2), "estimated", f"config override + {SOURCE}")


def test_zero_is_the_identity() -> None:
    included = Cost(Decimal(0), "included", "config override")
    assert Cost.zero() + included == included
    assert included + Cost.zero() == included
    assert Cost.zero() + Cost.zero() == Cost.zero()
    calls = [Cost(Decimal("0.5"), "estimated", SOURCE)] * 3
    assert sum(calls, Cost.zero()) == Cost(Decimal("1.5"), "estimated", SOURCE)
    assert Cost.zero().amount_float == 0.0


@pytest.mark.parametrize(
    ("amount", "status"),
    [(None, "estimated"), (None, "included"), (Decimal(1), "unknown")],
)
def test_amount_and_status_cannot_contradict(amount: Decimal | None, status: str) -> None:
    with pytest.raises(ValueError, match="contradicts"):
        Cost(amount, status, SOURCE)  # type: ignore[arg-type]


def _snapshot_prices() -> list[tuple[str, object]]:
    snapshot = genai_prices.data_snapshot.get_snapshot()
    return [(f"{p.id}/{m.id}", m.get_prices(AT)) for p in snapshot.providers for m in p.models]


def test_every_untiered_table_entry_prices_as_genai_prices_does() -> None:
    """The memo's line for each entry against genai-prices' own figure, for mixed usages:
    a line that mixed up two buckets, or missed a fixed fee, gives a different sum."""
    rng = random.Random(20261202)
    linear = 0
    for name, price in _snapshot_prices():
        line = pricing._linear_for(price)
        if line is None:
            continue
        linear += 1
        for _ in range(5):
            usage = Usage(
                input_tokens=rng.randint(0, 300_000),
                cache_read_tokens=rng.choice([0, rng.randint(1, 100_000)]),
                cache_write_tokens=rng.choice([0, rng.randint(1, 50_000)]),
                output_tokens=rng.randint(0, 20_000),
                reasoning_tokens=rng.choice([0, rng.randint(1, 20_000)]),
            )
            counts = pricing._genai_counts(usage)
            expected = price.calc_price(pricing._genai_usage(counts))["total_price"]  # type: ignore[attr-defined]
            assert line.total(counts) == expected, (name, usage)
    # Most of the table is flat-rate; a probe that wrongly gave up would fall back silently.
    assert linear > 2_000


def test_a_tiered_entry_has_no_line() -> None:
    """claude-sonnet-4-5 doubles its rates past 200K prompt tokens (test_long_context_figure
    checks that figure): no single line prices it."""
    snapshot = genai_prices.data_snapshot.get_snapshot()
    _, info = snapshot.find_provider_model("claude-sonnet-4-5", None, "anthropic", None)
    assert pricing._linear_for(info.get_prices(AT)) is None


def test_a_flat_model_is_priced_by_genai_prices_only_while_probing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = 0
    real = genai_prices.types.ModelPrice.calc_price

    def counted(self: object, usage: object) -> object:
        nonlocal calls
        calls += 1
        return real(self, usage)  # type: ignore[arg-type]

    monkeypatch.setattr(genai_prices.types.ModelPrice, "calc_price", counted)
    monkeypatch.setattr(pricing, "_LINEAR", {})
    usage = Usage(input_tokens=1_699, output_tokens=11)
    first = price_usage(usage, model="gpt-4o-mini", provider="openai", at=AT)
    probes = calls
    assert probes > 0
    for n in range(50):
        again = price_usage(
            Usage(input_tokens=1_699 + n, output_tokens=11), model="gpt-4o-mini", at=AT
        )
        assert again.status == "estimated"
    assert calls == probes
    # gpt-4o-mini: input 0.15, output 0.6 USD per MTok
    assert first == Cost(Decimal("0.00026145"), "estimated", SOURCE)


@pytest.mark.parametrize(
    ("amount", "shown"),
    [("1.23800", "1.238"), ("2.00", "2"), ("100", "100"), ("0", "0"), ("0.00026145", "0.00026145")],
)
def test_amounts_read_without_trailing_zeros(amount: str, shown: str) -> None:
    assert str(pricing._tidy(Decimal(amount))) == shown
