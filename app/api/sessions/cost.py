"""A session's cost report: spend by bucket, and what the same calls would have cost uncached.

The savings figure is a counterfactual priced call by call: each call's prompt (fresh +
cache read + cache write) re-priced as fresh input, minus what the ledger says the call
cost. Pricing a session's summed usage instead would cross long-context tiers no single
call crossed. A cache write costs more than a fresh read on some providers, so a session
that only ever wrote its cache shows negative savings, which is the truth.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from app.agent.cost.spend_caps import price_override
from app.config import Profile
from app.db.models import ApiCallRow
from app.providers.pricing import Cost, price_usage
from app.providers.usage import Usage

BUCKETS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")

Pricer = Callable[[ApiCallRow, Usage], Cost]


def call_usage(call: ApiCallRow) -> Usage:
    return Usage(
        input_tokens=call.input_tokens,
        output_tokens=call.output_tokens,
        cache_read_tokens=call.cache_read_tokens,
        cache_write_tokens=call.cache_write_tokens,
        reasoning_tokens=call.reasoning_tokens,
    )


def uncached(usage: Usage) -> Usage:
    """The same call with every prompt token read fresh."""
    return Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.output_tokens,
        reasoning_tokens=usage.reasoning_tokens,
    )


def profile_pricer(profiles: dict[str, Profile]) -> Pricer:
    """Price a ledger call the way the loop priced it: its profile's override, or the table."""

    def price(call: ApiCallRow, usage: Usage) -> Cost:
        profile = profiles.get(call.profile)
        return price_usage(
            usage,
            model=call.upstream_model,
            provider=profile.provider if profile else None,
            override=price_override(profile) if profile else None,
            # Dated tables: price the counterfactual at the call's time, as the ledger was.
            at=datetime.fromtimestamp(call.created_at, tz=UTC),
        )

    return price


@dataclass(frozen=True, slots=True)
class CostReport:
    tokens: dict[str, int]
    by_bucket: dict[str, Decimal | None]
    """Empty when the report was made without the split."""
    cost: Decimal | None
    """The ledger's total; None when any call is unpriced (never a partial sum)."""
    uncached_cost: Decimal | None
    savings: Decimal | None
    calls: int
    unpriced_calls: int

    def as_json(self) -> dict[str, Any]:
        def usd(value: Decimal | None) -> str | None:
            return None if value is None else str(value)

        return {
            "tokens": self.tokens,
            "cost_by_bucket_usd": {k: usd(v) for k, v in self.by_bucket.items()},
            "cost_usd": usd(self.cost),
            "uncached_cost_usd": usd(self.uncached_cost),
            "cache_savings_usd": usd(self.savings),
            "upstream_calls": self.calls,
            "unpriced_calls": self.unpriced_calls,
        }


class UncachedCosts:
    """Each ledger call's no-cache counterfactual, priced once per process.

    Pricing takes ~0.2 ms a call; a sessions page of 50 sessions with 100 calls each would
    otherwise spend a second re-pricing history that never changes (ledger rows are
    append-only and never reused, even by a purge). Bounded, oldest evicted first.
    """

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = limit
        self._known: OrderedDict[tuple[int, str, float], Decimal | None] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, call: ApiCallRow, price: Pricer) -> Decimal | None:
        # Not the id alone: SQLite may reuse the id of a deleted last row, and one process
        # can hold two stores (tests, benchmarks).
        key = (call.id, call.session_id, call.created_at) if call.id is not None else None
        if key is not None:
            with self._lock:
                if key in self._known:
                    return self._known[key]
        amount = price(call, uncached(call_usage(call))).amount
        if key is not None:
            with self._lock:
                self._known[key] = amount
                while len(self._known) > self.limit:
                    self._known.popitem(last=False)
        return amount


UNCACHED = UncachedCosts()


def cost_report(
    calls: Sequence[ApiCallRow],
    price: Pricer,
    *,
    buckets: bool = True,
    uncached_costs: UncachedCosts = UNCACHED,
) -> CostReport:
    """`buckets=False` skips the per-bucket split (four more pricings a call), for lists."""
    tokens = dict.fromkeys(BUCKETS, 0)
    by_bucket: dict[str, Decimal | None] = dict.fromkeys(BUCKETS, Decimal(0))
    total: Decimal | None = Decimal(0)
    counterfactual: Decimal | None = Decimal(0)
    unpriced = 0
    for call in calls:
        usage = call_usage(call)
        for bucket in BUCKETS:
            count: int = getattr(usage, bucket)
            tokens[bucket] += count
            running = by_bucket[bucket]
            if not count or running is None or not buckets:
                continue
            alone = price(call, Usage(**{bucket: count}))
            by_bucket[bucket] = None if alone.amount is None else running + alone.amount
        if call.cost_usd is None:
            unpriced += int(call.cost_status == "unknown")
            total = None if call.cost_status == "unknown" else total
        elif total is not None:
            total += Decimal(call.cost_usd)
        fresh = uncached_costs.get(call, price)
        if fresh is None or counterfactual is None:
            counterfactual = None
        else:
            counterfactual += fresh
    savings = None if total is None or counterfactual is None else counterfactual - total
    return CostReport(
        tokens=tokens,
        by_bucket=by_bucket if buckets else {},
        cost=total,
        uncached_cost=counterfactual,
        savings=savings,
        calls=len(calls),
        unpriced_calls=unpriced,
    )
