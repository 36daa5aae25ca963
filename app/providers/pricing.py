"""Turn a `Usage` into a `Cost` with a stated source, or admit the cost is unknown.

Rates come from the `genai-prices` package's bundled snapshot, which is versioned with the
package, so a cost can name exactly which table priced it. Nothing here fetches fresher
data: `genai_prices.UpdatePrices` would make the same request price differently from one
hour to the next with no version to show for it, and Courier makes no outbound calls
besides the model provider.

Two facts about genai-prices shape the conversion below (both checked against 0.2.3):

* its `input_tokens` is the *inclusive* prompt total and cache reads/writes are
  sub-counts of it (its Anthropic extractor sums `input_tokens` + both cache fields into
  `input_tokens`); it prices the fresh remainder by subtracting only the cache buckets the
  model has a rate for;
* so a model without a cache-read rate silently bills cache reads at the full input rate,
  which is why we check every non-empty bucket for its own rate before trusting the total.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final, Literal

import genai_prices

from app.providers.usage import Usage

CostStatus = Literal["estimated", "included", "unknown"]
"""`estimated`: list price times usage. `included`: covered by a flat-rate contract, so the
marginal cost is 0. `unknown`: at least one bucket with tokens has no rate."""

OVERRIDE_SOURCE: Final = "config override"
_SOURCE_SEP: Final = " + "
_PER_MTOK: Final = Decimal(1_000_000)

# (human label, Usage field, genai-prices price key). Reasoning is absent on purpose: it is
# a breakdown of output, billed inside it, so a missing reasoning rate never makes a cost
# unknown (the rare table entry with a distinct one is honoured in `_genai_counts`).
_BUCKETS: Final[tuple[tuple[str, str, str], ...]] = (
    ("input", "input_tokens", "input_mtok"),
    ("output", "output_tokens", "output_mtok"),
    ("cache read", "cache_read_tokens", "cache_read_mtok"),
    ("cache write", "cache_write_tokens", "cache_write_mtok"),
)


def load_price_table() -> None:
    """Parse the bundled price table now, at startup, not at the first priced call.

    Parsing it builds about 16,000 objects in about 16 ms: on a request's path that
    stalls every open stream, and objects made after the startup freeze (app/ops/drain.py)
    are walked again by every full collection.
    """
    genai_prices.data_snapshot.get_snapshot()


def prices_version() -> str:
    """The source string for every cost priced from the bundled genai-prices table."""
    return f"genai-prices {genai_prices.__version__}"


@dataclass(frozen=True, slots=True)
class PriceOverride:
    """Operator-configured USD rates per million tokens for one model, replacing the table.

    A rate left as None is unknown, not free: usage in that bucket makes the cost unknown.
    Rates are never mixed with genai-prices ones, so a cost always has a single source.
    """

    input_per_mtok: Decimal | None = None
    output_per_mtok: Decimal | None = None
    cache_read_per_mtok: Decimal | None = None
    cache_write_per_mtok: Decimal | None = None
    included: bool = False
    """A flat-rate contract (or a local model): every call costs 0 with status `included`."""

    def __post_init__(self) -> None:
        # A bad rate is a config mistake; failing at startup beats billing a negative cost.
        for name in (
            "input_per_mtok",
            "output_per_mtok",
            "cache_read_per_mtok",
            "cache_write_per_mtok",
        ):
            _check_rate(name, getattr(self, name))

    def rate_for(self, field: str) -> Decimal | None:
        """The override rate for a `Usage` bucket field name."""
        return {
            "input_tokens": self.input_per_mtok,
            "output_tokens": self.output_per_mtok,
            "cache_read_tokens": self.cache_read_per_mtok,
            "cache_write_tokens": self.cache_write_per_mtok,
        }[field]


def _check_rate(name: str, rate: Decimal | None) -> None:
    if rate is None:
        return
    if not isinstance(rate, Decimal) or not rate.is_finite() or rate < 0:
        raise ValueError(f"PriceOverride.{name} must be a finite, non-negative Decimal: {rate!r}")


@dataclass(frozen=True, slots=True)
class Cost:
    """A USD amount with where its rates came from; `amount` is None exactly when unknown."""

    amount: Decimal | None
    status: CostStatus
    source: str
    """`genai-prices <version>`, `config override`, or several joined by ` + ` after a sum.
    Empty only for `Cost.zero()`, which is what makes it the identity of `+`."""
    notes: tuple[str, ...] = ()
    """Why a cost is unknown, or anything else a reader of the figure should know."""

    def __post_init__(self) -> None:
        # The invariant every consumer relies on: no number is ever shown for an unknown cost,
        # and a known cost always has one.
        if (self.amount is None) != (self.status == "unknown"):
            raise ValueError(f"Cost amount {self.amount!r} contradicts status {self.status!r}")

    @classmethod
    def zero(cls) -> Cost:
        """The starting point for summing a turn's calls; adding it changes nothing."""
        return cls(Decimal(0), "estimated", "")

    @property
    def amount_float(self) -> float | None:
        """For JSON and metrics, which cannot carry Decimal; None stays None (never 0.0)."""
        return None if self.amount is None else float(self.amount)

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        # zero() has no source; without this, a sum of `included` calls started from zero()
        # would come out `estimated`.
        if not self.source and self.amount == 0 and not self.notes:
            return other
        if not other.source and other.amount == 0 and not other.notes:
            return self
        status = _combined_status(self.status, other.status)
        amount = None if status == "unknown" else _known(self.amount) + _known(other.amount)
        return Cost(
            amount=amount,
            status=status,
            source=_SOURCE_SEP.join(
                _dedupe([*self.source.split(_SOURCE_SEP), *other.source.split(_SOURCE_SEP)])
            ),
            notes=tuple(_dedupe([*self.notes, *other.notes])),
        )


def _combined_status(left: CostStatus, right: CostStatus) -> CostStatus:
    # Unknown anywhere poisons the sum (rule 7: never a partial sum); any list-priced part
    # makes the whole an estimate; only all-included stays included.
    if "unknown" in (left, right):
        return "unknown"
    if "estimated" in (left, right):
        return "estimated"
    return "included"


def _known(amount: Decimal | None) -> Decimal:
    assert amount is not None, "a non-unknown Cost always has an amount"
    return amount


def _dedupe(items: Iterable[str]) -> list[str]:
    return [item for item in dict.fromkeys(items) if item]


def _unknown(source: str, note: str) -> Cost:
    return Cost(amount=None, status="unknown", source=source, notes=(note,))


# ------------------------------------------------------------------------------ pricing


def price_usage(
    usage: Usage,
    *,
    model: str,
    provider: str | None = None,
    override: PriceOverride | None = None,
    at: datetime | None = None,
) -> Cost:
    """Price one upstream call's usage in USD; never raises for unknown models or usage.

    Price each call and sum the `Cost`s rather than pricing a summed `Usage`: long-context
    tiers and per-request fees apply per request, so a turn's summed prompt would cross the
    200K tier (or pay one request fee) when no single call did.

    `provider` is a hint for genai-prices' provider id ("anthropic", "openai", ...); if that
    provider does not list the model we fall back to matching the model name alone and say
    so in a note. `at` is the request time, which selects dated and time-of-day prices
    (DeepSeek off-peak); it defaults to now.
    """
    if override is not None:
        return _price_with_override(usage, override)
    source = prices_version()
    # Nothing to price, nothing missing: true even for a model the table has never heard of.
    if all(getattr(usage, field) == 0 for _, field, _ in _BUCKETS):
        return Cost(Decimal(0), "estimated", source)
    return _price_with_genai(usage, model=model, provider=provider, at=at, source=source)


def _price_with_override(usage: Usage, override: PriceOverride) -> Cost:
    if override.included:
        return Cost(Decimal(0), "included", OVERRIDE_SOURCE)
    missing = [
        label
        for label, field, _ in _BUCKETS
        if getattr(usage, field) > 0 and override.rate_for(field) is None
    ]
    if missing:
        return _unknown(OVERRIDE_SOURCE, f"config override has no {_join(missing)} rate")
    amount = Decimal(0)
    for _, field, _ in _BUCKETS:
        tokens: int = getattr(usage, field)
        rate = override.rate_for(field)
        if tokens and rate is not None:
            amount += Decimal(tokens) * rate / _PER_MTOK
    return Cost(amount, "estimated", OVERRIDE_SOURCE)


_UNLISTED: set[tuple[str, str | None, str]] = set()
"""(model, provider hint, table version) the table has no price for; genai-prices caches
its hits but searches every provider again on each miss (a local model's every call)."""


def _price_with_genai(
    usage: Usage, *, model: str, provider: str | None, at: datetime | None, source: str
) -> Cost:
    when = at if at is not None else datetime.now(tz=UTC)
    notes: list[str] = []
    if (model, provider, source) in _UNLISTED:
        # The table does not change while we run: a model it lacks is not searched again.
        hint = "" if provider is None else f" (provider {provider!r})"
        return _unknown(source, f"{source} has no price for model {model!r}{hint}")
    try:
        try:
            entry = _entry(model, provider, when)
        except LookupError:
            if provider is None:
                _UNLISTED.add((model, provider, source))
                raise
            # The hint often names the wire ("openai" for any OpenAI-compatible upstream),
            # not the vendor, so let the model name find its vendor, and say we did.
            entry = _entry(model, None, when)
            notes.append(
                f"provider {provider!r} does not list {model!r} in {source}; "
                f"priced as {entry.model_id} by model name"
            )
        total = entry.total(usage)
    except LookupError:
        _UNLISTED.add((model, provider, source))
        hint = "" if provider is None else f" (provider {provider!r})"
        return _unknown(source, f"{source} has no price for model {model!r}{hint}")
    except ValueError as exc:  # the table rejected the usage shape; never guess a figure
        return _unknown(source, f"{source} could not price {model!r}: {exc}")

    # genai-prices bills a cache bucket it has no rate for at the input rate instead, so the
    # total is only trustworthy if every non-empty bucket has its own rate.
    missing = [
        label
        for label, field, price_key in _BUCKETS
        if getattr(usage, field) > 0 and getattr(entry.price, price_key, None) is None
    ]
    if missing:
        return _unknown(source, f"{source} has no {_join(missing)} rate for {entry.model_id}")
    if entry.fetched_at is not None:
        # Someone installed a fetched snapshot in this process; the version no longer names
        # the table, so say when the table was fetched.
        notes.append(f"rates from a snapshot fetched at {entry.fetched_at.isoformat()}")
    return Cost(_tidy(total), "estimated", source, tuple(notes))


def _tidy(amount: Decimal) -> Decimal:
    """The amount without trailing zeros after the point (1.23800 -> 1.238, 2.00 -> 2): the
    same cost otherwise reads differently depending on how its terms were summed."""
    tidy = amount.normalize()
    exponent = tidy.as_tuple().exponent
    return tidy.quantize(Decimal(1)) if isinstance(exponent, int) and exponent > 0 else tidy


@dataclass(frozen=True, slots=True)
class _Entry:
    """The table's price for one model at one moment, as genai-prices resolves it."""

    model_id: str
    price: Any
    """genai-prices' `ModelPrice` (untyped for mypy here)."""
    fetched_at: datetime | None

    def total(self, usage: Usage) -> Decimal:
        # Both ways price the `ModelPrice` itself: `ModelInfo.calc_price` adds only a Groq
        # Whisper audio rule over it, and our usage has no audio.
        counts = _genai_counts(usage)
        linear = _linear_for(self.price)
        if linear is not None:
            return linear.total(counts)
        return Decimal(self.price.calc_price(_genai_usage(counts))["total_price"])


def _entry(model: str, provider: str | None, when: datetime) -> _Entry:
    """genai-prices' own lookup (it caches hits) and the price in force `when`: dated
    prices and time-of-day ones (DeepSeek off-peak) are picked per call."""
    snapshot: Any = genai_prices.data_snapshot.get_snapshot()
    vendor, info = snapshot.find_provider_model(model, None, provider, None)
    fetched_at = snapshot.timestamp if snapshot.from_auto_update else None
    return _Entry(f"{vendor.id}/{info.id}", info.get_prices(when), fetched_at)


_Counts = tuple[int, int, int, int, int]
"""What genai-prices reads of a usage: the inclusive prompt, cache read, cache write,
output, and the reasoning part of output."""


def _genai_counts(usage: Usage) -> _Counts:
    """Our disjoint buckets in genai-prices' nested form: input_tokens is the whole prompt."""
    return (
        usage.prompt_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.output_tokens,
        # Only used when a model has a distinct reasoning rate (Perplexity deep research);
        # elsewhere it stays inside output. Clamped because genai-prices rejects a part
        # larger than its whole, and a summed Usage could in principle carry one.
        min(usage.reasoning_tokens, usage.output_tokens),
    )


def _genai_usage(counts: _Counts) -> Any:
    prompt, cache_read, cache_write, output, reasoning = counts
    return genai_prices.Usage(
        input_tokens=prompt,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        output_tokens=output,
        output_reasoning_tokens=reasoning,
    )


@dataclass(frozen=True, slots=True)
class _Linear:
    """A price with no tiers, as the function genai-prices computes for it: a fixed part
    plus a rate per token of each count. The rates are read off genai-prices' own figures
    for probe usages, so they are the table's, not ours.

    `ModelPrice.calc_price` rebuilds its unit registry and decomposition on every call:
    about 300 µs of the event loop's CPU per upstream call in the server, a tenth of a
    new-session request. This is a few microseconds."""

    base: Decimal
    rates: tuple[Decimal, ...]

    def total(self, counts: _Counts) -> Decimal:
        total = self.base
        for rate, count in zip(self.rates, counts, strict=True):
            if count:
                total += rate * count
        return total


_PROBE: Final = 1_000_000
_MIXED_PROBE: Final[_Counts] = (3_000_017, 1_000_003, 999_983, 12_345, 2_345)
_LINEAR: dict[int, tuple[Any, _Linear | None]] = {}
"""Per `ModelPrice` (by identity, held so the id stays its own): its linear form, or None
where it has none (tiers) and every call goes through genai-prices."""


def _linear_for(price: Any) -> _Linear | None:
    found = _LINEAR.get(id(price))
    if found is not None and found[0] is price:
        return found[1]
    linear = _probe(price)
    _LINEAR[id(price)] = (price, linear)
    return linear


def _probe(price: Any) -> _Linear | None:
    if any(isinstance(v, genai_prices.types.TieredPrices) for v in vars(price).values()):
        return None  # the rate depends on the prompt's size: not one line

    def at(counts: _Counts) -> Decimal:
        return Decimal(price.calc_price(_genai_usage(counts))["total_price"])

    n = _PROBE
    try:
        base = at((0, 0, 0, 0, 0))
        fresh = (at((n, 0, 0, 0, 0)) - base) / n
        output = (at((0, 0, 0, n, 0)) - base) / n
        linear = _Linear(
            base,
            (
                fresh,
                (at((n, n, 0, 0, 0)) - base) / n - fresh,
                (at((n, 0, n, 0, 0)) - base) / n - fresh,
                output,
                (at((0, 0, 0, n, n)) - base) / n - output,
            ),
        )
        # A usage mixing every count must price the same both ways, or the entry is not
        # the line the probes assume (a unit this form does not know).
        if linear.total(_MIXED_PROBE) != at(_MIXED_PROBE):
            return None
    except ValueError:
        return None
    return linear


def _join(labels: list[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " or " + labels[-1]
